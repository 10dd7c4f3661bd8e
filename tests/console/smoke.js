// The browser side of tests/console/ with nothing else: playwright-core
// starts chromium, loads one page served here under the console's
// Content-Security-Policy (script-src 'self', so no string may be evaluated
// as script in the page) and waits for the page's own script the way
// console.spec.js waits for a job (wait.js). Needs no broker and no bridge:
// scripts/stock-check.sh runs it in a stock bookworm root right after
// scripts/install-deps.sh, to prove that what install-deps installs there
// (Debian's node and chromium, the pinned playwright-core) can run the test.
// Exits non-zero with one line saying what failed.
'use strict';
const { chromium } = require('playwright-core');
const assert = require('assert');
const http = require('http');
const { waitForText } = require('./wait');

// The console's policy (src/cli/console_http.c); the inline script below
// must be refused, the one from 'self' must run.
const csp = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; " +
  "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'; object-src 'none'";
const pages = {
  '/': ['text/html; charset=utf-8',
    '<!doctype html><title>smoke</title><p id="state">running</p>' +
    '<p id="inline">not run</p><script>document.getElementById("inline").textContent = "ran";</script>' +
    '<script src="/app.js"></script>'],
  // Like the job page's script: the state changes a moment after the load.
  '/app.js': ['text/javascript',
    'setTimeout(function () { document.getElementById("state").textContent = "done"; }, 300);'],
};

async function main() {
  const server = http.createServer((req, res) => {
    const p = pages[req.url];
    if (!p) { res.writeHead(404); res.end(); return; }
    res.writeHead(200, { 'Content-Type': p[0], 'Content-Security-Policy': csp });
    res.end(p[1]);
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    args: ['--no-sandbox'], // root in CI: chromium's sandbox needs a user namespace
  });
  try {
    const page = await browser.newPage();
    const violations = [];
    page.on('console', (m) => { if (/Content Security Policy/.test(m.text())) violations.push(m.text()); });
    await page.goto(`http://127.0.0.1:${server.address().port}/`);
    assert.strictEqual(await waitForText(page, '#state', 'running', 10000), 'done', 'the page script ran');
    assert.strictEqual(await page.textContent('#inline'), 'not run', 'the CSP refused the inline script');
    assert.strictEqual(violations.length, 1, 'one CSP violation (the inline script): ' + JSON.stringify(violations));
    console.log(`smoke.js: node ${process.version}, playwright-core ${require('playwright-core/package.json').version}, ` +
      `chromium ${browser.version()}: ok`);
  } finally {
    await browser.close();
    server.close();
  }
}

main().catch((e) => {
  console.error('smoke.js: ' + (e && e.stack ? e.stack : e));
  process.exit(1);
});
