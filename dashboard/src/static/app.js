// The dashboard's only script: local times, the confirm dialog (with what a decision is on),
// the live run page (its timeline and header) and the live lists.
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
      document.getElementById("confirm-yes").textContent = form.dataset.confirmYes || "Yes, do it";
      // A decision shows what it is on: the call, the prompt and the model's text.
      var detail = document.getElementById("confirm-detail");
      var scope = form.closest(".decide");
      var shown = scope && scope.querySelector("template.confirm-detail");
      if (detail) { detail.replaceChildren(shown ? shown.content.cloneNode(true) : ""); }
      dialog.dataset.action = form.dataset.action || "";
      dialog.forForm = form;
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
// Server-sent events from url to the handlers in on; the stream is closed while the tab is
// hidden (over HTTP/1.1 a browser opens few connections to one site, and every open live page
// holds one) and opened again when it is shown. Returns the function that ends it.
function follow(url, on) {
  var es = null, done = false;
  function open() {
    if (es || done || document.hidden) { return; }
    es = new EventSource(url);
    Object.keys(on).forEach(function (name) { es.addEventListener(name, on[name]); });
  }
  function close() { if (es) { es.close(); es = null; } }
  document.addEventListener("visibilitychange", function () { if (document.hidden) { close(); } else { open(); } });
  open();
  return function () { done = true; close(); };
}
// Parts of a live page the server sent while the operator was using them: each keeps the
// HTML it is to show once it is no longer in use (see place).
var waiting = [];
function fromHtml(html) {
  var tpl = document.createElement("template");
  tpl.innerHTML = html.trim();
  return tpl.content.firstElementChild;
}
// Puts fresh in place of old. A part in use (inUse) is never replaced: its children in use
// stay as they are and the others are replaced around them; the whole comes once it is no
// longer in use (settle).
function place(old, fresh) {
  var at = waiting.indexOf(old);
  if (at >= 0) { waiting.splice(at, 1); }
  if (!inUse(old)) { old.replaceWith(fresh); localTimes(fresh); confirmForms(fresh); return; }
  var html = fresh.outerHTML;
  Array.prototype.slice.call(old.attributes).forEach(function (a) { if (!fresh.hasAttribute(a.name)) { old.removeAttribute(a.name); } });
  Array.prototype.forEach.call(fresh.attributes, function (a) { old.setAttribute(a.name, a.value); });
  var kept = {};
  slots(old).forEach(function (s) { if (inUse(s.el)) { kept[s.key] = s.el; } else { s.el.remove(); } });
  var next = old.firstElementChild;
  slots(fresh).forEach(function (s) {
    var use = kept[s.key] || s.el;
    delete kept[s.key];
    if (use === next) { next = next.nextElementSibling; return; }
    old.insertBefore(use, next);
    if (use === s.el) { localTimes(use); confirmForms(use); }
  });
  old.liveNext = html;
  waiting.push(old);
}
// The element children of el, each keyed by its tag, class and place among its like.
function slots(el) {
  var seen = {};
  return Array.prototype.map.call(el.children, function (c) {
    var k = c.tagName + "." + c.className;
    seen[k] = (seen[k] || 0) + 1;
    return { key: k + "#" + seen[k], el: c };
  });
}
// Brings in the whole of each waiting part no longer in use.
function settle() {
  waiting.slice().forEach(function (el) {
    if (!el.isConnected) { waiting.splice(waiting.indexOf(el), 1); return; }
    if (!inUse(el)) { place(el, fromHtml(el.liveNext)); }
  });
}
function settleSoon() { if (waiting.length) { setTimeout(settle, 0); } }
["focusout", "input", "change", "selectionchange"].forEach(function (name) { document.addEventListener(name, settleSoon); });
document.addEventListener("toggle", settleSoon, true);
document.addEventListener("close", settleSoon, true);
function live() {
  var ol = document.getElementById("timeline");
  if (!ol || !ol.dataset.live || !window.EventSource) { return; }
  var end = follow(ol.dataset.live, {
    item: function (ev) {
      var li = fromHtml(ev.data);
      if (!li) { return; }
      var old = document.getElementById(li.id);
      if (old) { place(old, li); } else { ol.appendChild(li); localTimes(li); confirmForms(li); }
    },
    header: function (ev) {
      var fresh = fromHtml(ev.data), old = document.getElementById("run-header");
      if (fresh && old) { place(old, fresh); }
    },
    end: function () { end(); }
  });
}
// A live list: the server sends the list's whole HTML when it changed; parts and rows are
// matched by id or data-key and only changed ones are replaced, never one in use.
function keyOf(el, i) { return el.id || el.getAttribute("data-key") || el.tagName + ":" + i; }
function inUse(el) {
  var a = document.activeElement, dialog = document.getElementById("confirm"), sel = window.getSelection();
  if (a && a !== document.body && el.contains(a)) { return true; }
  if (dialog && dialog.open && dialog.forForm && el.contains(dialog.forForm)) { return true; }
  if (sel && !sel.isCollapsed && sel.containsNode(el, true)) { return true; }
  if (el.matches("details[open]") || el.querySelector("details[open]")) { return true; }
  return Array.prototype.some.call(el.querySelectorAll("input, textarea"), function (f) {
    return f.type !== "hidden" && f.value !== f.defaultValue;
  });
}
function remember(region) {
  Array.prototype.forEach.call(region.children, function (part) {
    part.liveSrc = part.outerHTML;
    if (part.tBodies && part.tBodies[0]) {
      Array.prototype.forEach.call(part.tBodies[0].children, function (row) { row.liveSrc = row.outerHTML; });
    }
  });
}
function sync(parent, incoming) {
  var old = {};
  Array.prototype.forEach.call(parent.children, function (c, i) { old[keyOf(c, i)] = c; });
  var at = parent.firstElementChild;
  Array.prototype.slice.call(incoming.children).forEach(function (n, i) {
    var k = keyOf(n, i), o = old[k], use = n, src = n.outerHTML;
    delete old[k];
    if (o && o.tBodies && o.tBodies[0] && n.tBodies && n.tBodies[0]) {
      sync(o.tBodies[0], n.tBodies[0]); use = o;
    } else if (o && (o.liveSrc === src || inUse(o))) {
      use = o;
    } else {
      n.liveSrc = src;
    }
    if (use === at) { at = at.nextElementSibling; return; }
    parent.insertBefore(use, at);
    if (o && o !== use) { if (o === at) { at = o.nextElementSibling; } o.remove(); }
    if (use === n) { localTimes(n); confirmForms(n); }
  });
  Object.keys(old).forEach(function (k) { if (!inUse(old[k])) { old[k].remove(); } });
}
function liveLists() {
  if (!window.EventSource) { return; }
  document.querySelectorAll("[data-live-list]").forEach(function (region) {
    follow(region.dataset.liveList, { list: function (ev) {
      var tpl = document.createElement("template");
      tpl.innerHTML = ev.data;
      sync(region, tpl.content);
    } });
  });
}
document.addEventListener("DOMContentLoaded", function () {
  document.querySelectorAll("[data-live-list]").forEach(remember);
  localTimes(document); confirmForms(document); live(); liveLists();
});
