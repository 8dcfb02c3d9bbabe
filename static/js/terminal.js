// The service page's Terminal tab (issue 39): xterm.js in the page, a WebSocket to the proxy, which logs
// into the pod's own sshd (proxy/terminal.py). Keystrokes and output are binary messages; a text message
// {"resize": [cols, rows]} follows the terminal's size.
(function () {
  "use strict";
  const card = document.getElementById("terminal-card");
  if (!card) return;
  const button = document.getElementById("terminal-open");
  const screen = document.getElementById("terminal-screen");
  const status = document.getElementById("terminal-status");
  // The policy allows no inline style; xterm writes its theme and cell sizes into <style> elements it makes
  // as it runs, so those carry this page's style nonce (given on this script's tag; portal/security.py).
  const styleNonce = document.currentScript && document.currentScript.nonce;
  let socket = null;

  function nonceStyles() {
    if (!styleNonce || document.createElement.nonced) return;
    const create = document.createElement;
    document.createElement = function (name, options) {
      const element = create.call(this, name, options);
      if (String(name).toLowerCase() === "style") element.setAttribute("nonce", styleNonce);
      return element;
    };
    document.createElement.nonced = true;
  }

  function say(text) {
    status.textContent = text;
  }

  function open() {
    say("Connecting…");
    try {
      start();
    } catch (error) {
      say("The terminal could not start: " + error);
      button.hidden = false;
    }
  }

  function start() {
    const TerminalClass = window.Terminal && (window.Terminal.Terminal || window.Terminal);
    const FitClass = window.FitAddon && (window.FitAddon.FitAddon || window.FitAddon);
    if (!TerminalClass) {
      say("The terminal could not load (its script is missing).");
      return;
    }
    button.hidden = true;
    screen.hidden = false;
    nonceStyles();
    const term = new TerminalClass({ cursorBlink: true, convertEol: false, fontSize: 14, scrollback: 5000 });
    const fit = FitClass ? new FitClass() : null;
    if (fit) term.loadAddon(fit);
    term.open(screen);
    if (fit) fit.fit();
    const scheme = location.protocol === "https:" ? "wss:" : "ws:";
    socket = new WebSocket(scheme + "//" + location.host + card.dataset.socket);
    socket.binaryType = "arraybuffer";
    const encoder = new TextEncoder();
    const sendSize = () => {
      if (socket.readyState === WebSocket.OPEN) socket.send(JSON.stringify({ resize: [term.cols, term.rows] }));
    };
    socket.onopen = () => {
      say("Connected.");
      sendSize();
      term.focus();
    };
    socket.onmessage = (event) => term.write(new Uint8Array(event.data));
    socket.onclose = (event) => {
      const why = event.code === 4403 ? "Your access to this service ended." : event.reason || "The session ended.";
      say(why + " Reload the page for a new terminal.");
      term.options.disableStdin = true;
    };
    term.onData((data) => {
      if (socket.readyState === WebSocket.OPEN) socket.send(encoder.encode(data));
    });
    term.onResize(sendSize);
    window.addEventListener("resize", () => fit && fit.fit());
  }

  button.addEventListener("click", open);
})();
