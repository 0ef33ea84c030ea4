"""Media on the host: files people send a group (voice notes transcribed, PDFs' text
extracted, images re-encoded for vision models) and files a group sends (copied into the
host's outbox). ``inbox`` says what a stored file is and the lines a turn carries;
``prepare`` does the work before a turn; ``transcribe``, ``pdf`` and ``images`` each
own one kind of file; ``outbox`` owns files out."""
