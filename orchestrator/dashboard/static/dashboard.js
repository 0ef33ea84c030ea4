// Replies of chat-box messages as they arrive: poll each message that is not done yet.
// Text is set with textContent only: a reply is never parsed as HTML.
"use strict";
(function () {
  function poll(item) {
    const id = item.dataset.messageId;
    fetch("/ui/api/messages/" + encodeURIComponent(id), { credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (m) {
        if (!m) { return; }
        const list = item.querySelector(".replies");
        while (list.children.length < m.replies.length) {
          const li = document.createElement("li");
          const who = document.createElement("span");
          who.className = "sender";
          who.textContent = (list.dataset.group || "group") + ":";
          li.appendChild(who);
          li.appendChild(document.createTextNode(" " + m.replies[list.children.length]));
          list.appendChild(li);
        }
        item.dataset.state = m.state;
        item.querySelector(".state").textContent = m.state;
        if (m.state !== "done" && m.state !== "dead") { setTimeout(function () { poll(item); }, 700); }
      })
      .catch(function () { setTimeout(function () { poll(item); }, 2000); });
  }
  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("#chat-log > li").forEach(function (item) {
      if (item.dataset.state !== "done" && item.dataset.state !== "dead") { poll(item); }
    });
  });
})();
