#!/usr/bin/env python3
"""Drives the web console in Debian's headless chromium over the DevTools protocol, as a
person would: opens the page, signs in with a token (typed into the form), visits each
view, and for each keeps the rendered #page HTML and a screenshot, and collects console
errors and uncaught exceptions.

    console_cdp.py CHROMIUM URL TOKEN OUT_DIR VIEW...

VIEW is a hash route (map, queues, jobs, usage, job/ID), or a route and one filter chosen
in its page as a person would (jobs?queue=vision: the select set, its change fired, the
page drawn again with the choice). Writes OUT_DIR/NAME.html and
OUT_DIR/NAME.png per view (NAME: the view with / as -) and prints one JSON object:
{"signed_in": bool, "views": {VIEW: {"html": ..., "error": ..., "render_ms": ..., "height_px": ...,
"chart_y": ..., "legend_y": ...}}, "console_errors": [...]} (the page's height and where its first
chart and first legend begin, in px from the top; -1 where it has none).
Only the standard library: the WebSocket client below is the least the protocol needs
(RFC 6455 text frames, client-masked), since Debian's python3 has none built in.
"""
import base64
import json
import os
import socket
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request


class DevTools:
    def __init__(self, ws_url):
        host_port, path = ws_url[len("ws://"):].split("/", 1)
        host, port = host_port.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=30)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall((f"GET /{path} HTTP/1.1\r\nHost: {host_port}\r\nUpgrade: websocket\r\n"
                           f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise EOFError("DevTools closed the connection during the handshake")
            head += chunk
        head, self.buf = head.split(b"\r\n\r\n", 1)
        if b" 101 " not in head.split(b"\r\n")[0]:
            raise RuntimeError("DevTools refused the WebSocket: " + head.decode(errors="replace"))
        self.next_id = 0
        self.events = []

    def _read(self, n):
        while len(self.buf) < n:
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                raise EOFError("DevTools closed the connection")
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def _message(self):
        payload = b""
        while True:
            b0, b1 = self._read(2)
            n = b1 & 0x7F
            if n == 126:
                n = struct.unpack(">H", self._read(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", self._read(8))[0]
            mask = self._read(4) if b1 & 0x80 else None
            data = self._read(n)
            if mask:
                data = bytes(b ^ mask[i % 4] for i, b in enumerate(data))
            if b0 & 0x0F in (0x9, 0xA):  # ping, pong: not ours to answer for a test
                continue
            payload += data
            if b0 & 0x80:
                return json.loads(payload)

    def call(self, method, **params):
        self.next_id += 1
        data = json.dumps({"id": self.next_id, "method": method, "params": params}).encode()
        head = bytearray([0x81])
        if len(data) < 126:
            head.append(0x80 | len(data))
        elif len(data) < 65536:
            head += bytes([0x80 | 126]) + struct.pack(">H", len(data))
        else:
            head += bytes([0x80 | 127]) + struct.pack(">Q", len(data))
        mask = os.urandom(4)
        self.sock.sendall(bytes(head) + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data)))
        while True:
            msg = self._message()
            if msg.get("id") == self.next_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            self.events.append(msg)

    def evaluate(self, expression):
        r = self.call("Runtime.evaluate", expression=expression, awaitPromise=True, returnByValue=True)
        if "exceptionDetails" in r:
            raise RuntimeError(f"{expression}: {r['exceptionDetails']}")
        return r["result"].get("value")

    def wait_for(self, expression, seconds=15):
        deadline = time.time() + seconds
        while time.time() < deadline:
            if self.evaluate(expression):
                return True
            time.sleep(0.1)
        return False


def main():
    chromium, url, token, out_dir = sys.argv[1:5]
    views = sys.argv[5:]
    os.makedirs(out_dir, exist_ok=True)
    profile = tempfile.mkdtemp(prefix="gantry-console-")
    browser = subprocess.Popen(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--remote-debugging-port=0",
         "--remote-allow-origins=*", f"--user-data-dir={profile}", "--window-size=1280,900", "about:blank"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        port_file = os.path.join(profile, "DevToolsActivePort")
        deadline = time.time() + 60
        while not (os.path.exists(port_file) and open(port_file).read().strip()) and time.time() < deadline:
            time.sleep(0.1)
        port = open(port_file).read().split()[0]
        pages = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list"))
        page = next(p for p in pages if p["type"] == "page")
        dt = DevTools(page["webSocketDebuggerUrl"])
        dt.call("Runtime.enable")
        dt.call("Log.enable")
        dt.call("Page.enable")
        dt.call("Page.navigate", url=url)
        result = {"signed_in": False, "views": {}, "console_errors": []}
        if dt.wait_for("!!document.getElementById('signin') && !document.getElementById('signin').hidden"):
            dt.evaluate(f"document.getElementById('tok').value = {json.dumps(token)};"
                        "document.getElementById('signin').requestSubmit(); true")
            result["signed_in"] = dt.wait_for("!document.getElementById('who').hidden")
        for view in views:
            name = view.replace("/", "-").replace("?", "-").replace("=", "-")
            route, _, choice = view.partition("?")
            t0 = time.perf_counter()
            dt.evaluate(f"location.hash = {json.dumps('#' + route)}; true")
            ok = dt.wait_for(f"document.getElementById('page').dataset.view === {json.dumps(route)} && "
                             "document.getElementById('page').innerHTML.length > 0", 60)
            if ok and choice:
                key, value = choice.split("=", 1)
                select = f"document.querySelector('[data-filter=\"{key}\"]')"
                dt.evaluate(f"{select}.value = {json.dumps(value)};"
                            f"{select}.dispatchEvent(new Event('change', {{bubbles: true}})); true")
                ok = dt.wait_for(f"{select} && {select}.querySelector('option[selected]') && "
                                 f"{select}.querySelector('option[selected]').value === {json.dumps(value)}", 60)
            render_ms = (time.perf_counter() - t0) * 1000  # to within the 0.1 s the wait polls at
            time.sleep(0.3)  # the charts and tables of this view, drawn
            html = dt.evaluate("document.getElementById('page').innerHTML") or ""
            err = dt.evaluate("document.getElementById('err').textContent") or ""
            # How long the page is, and how far down its first chart and first legend are
            # (px from the top; -1: none), as a person scrolling it finds them.
            geometry = dt.evaluate(
                "(() => { const y = q => { const e = document.querySelector('#page ' + q);"
                " return e ? Math.round(e.getBoundingClientRect().top + window.scrollY) : -1; };"
                " return JSON.stringify([document.documentElement.scrollHeight, y('svg'), y('.legend')]); })()")
            height, chart_y, legend_y = json.loads(geometry) if geometry else (-1, -1, -1)
            result["views"][view] = {"html": html, "error": err if ok else (err or "the view did not render"),
                                     "render_ms": render_ms, "height_px": height, "chart_y": chart_y,
                                     "legend_y": legend_y}
            with open(os.path.join(out_dir, name + ".html"), "w") as f:
                f.write(html)
            shot = dt.call("Page.captureScreenshot", format="png")
            with open(os.path.join(out_dir, name + ".png"), "wb") as f:
                f.write(base64.b64decode(shot["data"]))
        for e in dt.events:
            m, p = e.get("method"), e.get("params", {})
            if m == "Runtime.exceptionThrown":
                result["console_errors"].append(json.dumps(p.get("exceptionDetails", {}))[:500])
            elif m == "Runtime.consoleAPICalled" and p.get("type") == "error":
                result["console_errors"].append(json.dumps(p.get("args", []))[:500])
            elif m == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
                entry = p["entry"]
                text, where = entry.get("text", ""), entry.get("url", "")
                # The API's answers the page expects and shows: 401 from GET /v1/session
                # before signing in, 403 for another team's usage or logs. And the
                # browser's own favicon request.
                expected = (("status of 401" in text and where.endswith("/v1/session")) or "status of 403" in text
                            or where.endswith("/favicon.ico"))
                if not expected:
                    result["console_errors"].append(f"{text} ({where})"[:500])
        print(json.dumps(result))
    finally:
        browser.kill()
        browser.wait()
        subprocess.run(["rm", "-rf", profile])


if __name__ == "__main__":
    main()
