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
  let socket = null;

  function say(text) {
    status.textContent = text;
  }

  function open() {
    const TerminalClass = window.Terminal && (window.Terminal.Terminal || window.Terminal);
    const FitClass = window.FitAddon && (window.FitAddon.FitAddon || window.FitAddon);
    if (!TerminalClass) {
      say("The terminal could not load (its script is missing).");
      return;
    }
    button.hidden = true;
    screen.hidden = false;
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
    say("Connecting…");
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
