// An interrupted approval settled in the console (run by
// test_console_settles_an_interrupted_approval in tests/console/test_console.c,
// whose console reaches the broker through a proxy that cuts the first
// connection to publish to dsr.work there: the first approval's copy is
// never taken). The second operator approves: its connection is lost, and
// its intent stays in the trail; approving again is refused as interrupted, with a form to
// settle it that needs their check; with the check it is approved.
// Exits non-zero with one line saying what failed.
'use strict';
const { chromium } = require('playwright-core');
const assert = require('assert');
const path = require('path');

const base = process.env.CONSOLE_URL;
const op2 = { user: process.env.OP2_USER, pass: process.env.OP2_PASS };
const proposal = process.env.PROPOSAL;
const shots = process.env.SHOTS;

async function approveFromInbox(page) {
  // The item comes back to the DLQ once the interrupted pass lets it go.
  for (let i = 0; i < 60; i++) {
    await page.goto(base + '/review');
    const ids = await page.$$eval('#edits td.edit-id', (tds) => tds.map((td) => td.textContent));
    if (ids.includes(proposal)) break;
    await page.waitForTimeout(500); // polling the page: the item's return is the broker's
  }
  await Promise.all([page.waitForNavigation({ timeout: 120000 }), page.click('#edits button.approve')]);
  return page.textContent('#edit-result');
}

async function main() {
  const browser = await chromium.launch({ executablePath: process.env.CHROMIUM, args: ['--no-sandbox'] });
  const page = await (await browser.newContext({ viewport: { width: 390, height: 844 } })).newPage();
  page.setDefaultTimeout(60000);
  page.setDefaultNavigationTimeout(60000);
  await page.goto(base + '/login');
  await page.fill('#user', op2.user);
  await page.fill('#password', op2.pass);
  await Promise.all([page.waitForNavigation(), page.click('#sign-in')]);

  const first = await approveFromInbox(page);
  assert.match(first, /connection|lost|closed/i, 'the first approval: ' + first);
  const again = await approveFromInbox(page);
  assert.match(again, new RegExp(`edit ${proposal} of .* began and did not end`), 'approving again: ' + again);
  assert.strictEqual(await page.$$eval('#settle', (f) => f.length), 1, 'a form to settle it');
  await page.screenshot({ path: path.join(shots, 'phone-settle.png'), fullPage: true });
  // Without the check the form is not sent (required); posted anyway, refused.
  const csrf = await page.getAttribute('#settle input[name=csrf]', 'value');
  const unchecked = await page.request.post(base + '/edit/decide', {
    form: { csrf, proposal, kind: 'approve', 'after-interrupted': proposal }, maxRedirects: 0,
  });
  assert.strictEqual(unchecked.status(), 400, 'settling without the check');
  await page.check('#settle-checked');
  await Promise.all([page.waitForNavigation({ timeout: 60000 }), page.click('#settle-approve')]);
  const done = await page.textContent('#edit-result');
  assert.match(done, new RegExp(`^Done: edit ${proposal} approved by ${op2.user}`), 'settled: ' + done);
  await browser.close();
}

main().catch((e) => {
  console.error('settle.spec.js: ' + (e && e.stack ? e.stack : e));
  process.exit(1);
});
