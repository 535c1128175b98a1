// The dashboard's only script: local times, the confirm dialog, and the live timeline.
"use strict";
function localTimes(root) {
  root.querySelectorAll("time[datetime]").forEach(function (t) {
    var d = new Date(t.getAttribute("datetime"));
    if (!isNaN(d)) { t.title = t.getAttribute("datetime") + " UTC"; if (!t.dataset.age) { t.dataset.age = t.textContent; t.textContent = d.toLocaleString() + (t.closest("ol#timeline") ? "" : " (" + t.dataset.age + ")"); } }
  });
}
function confirmForms(root) {
  var dialog = document.getElementById("confirm");
  root.querySelectorAll("form[data-confirm]").forEach(function (form) {
    if (form.dataset.bound) { return; }
    form.dataset.bound = "1";
    form.addEventListener("submit", function (ev) {
      if (form.dataset.confirmed === "yes" || !dialog || !dialog.showModal) { return; }
      ev.preventDefault();
      document.getElementById("confirm-text").textContent = form.dataset.confirm;
      dialog.showModal();
      document.getElementById("confirm-yes").onclick = function () {
        var c = document.createElement("input");
        c.type = "hidden"; c.name = "confirmed"; c.value = "yes";
        form.appendChild(c); form.dataset.confirmed = "yes"; dialog.close(); form.submit();
      };
      document.getElementById("confirm-no").onclick = function () { dialog.close(); };
    });
  });
}
function live() {
  var ol = document.getElementById("timeline");
  if (!ol || !ol.dataset.live || !window.EventSource) { return; }
  var es = new EventSource(ol.dataset.live);
  es.addEventListener("item", function (ev) {
    var tpl = document.createElement("template");
    tpl.innerHTML = ev.data.trim();
    var li = tpl.content.firstElementChild;
    if (!li) { return; }
    var old = document.getElementById(li.id);
    if (old) { old.replaceWith(li); } else { ol.appendChild(li); }
    localTimes(li); confirmForms(li);
  });
  es.addEventListener("status", function (ev) {
    var s = document.getElementById("run-status");
    if (s) { s.dataset.status = ev.data; s.textContent = ev.data; s.className = "badge s-" + ev.data; }
  });
  es.addEventListener("end", function () { es.close(); });
}
document.addEventListener("DOMContentLoaded", function () { localTimes(document); confirmForms(document); live(); });
