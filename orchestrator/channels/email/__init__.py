"""Email: a mailbox read over IMAP and answered over SMTP, on the chat-app core."""
