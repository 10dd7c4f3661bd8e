// The console in a real browser (run by tests/console/test_console.c, which
// fills the DLQ with a real bridge and starts `dlq-bridge console`).
// Exits non-zero with one line saying what failed.
'use strict';
const { chromium } = require('playwright-core');
const assert = require('assert');
const path = require('path');
const { waitForText } = require('./wait');

const base = process.env.CONSOLE_URL;
const op = { user: process.env.OP_USER, pass: process.env.OP_PASS };
const ro = { user: process.env.RO_USER, pass: process.env.RO_PASS };
const shots = process.env.SHOTS || '';
const timeouts = Number(process.env.TIMEOUTS);
const scripts = Number(process.env.SCRIPTS);
const total = timeouts + scripts;

async function shot(page, name) {
  if (shots) await page.screenshot({ path: path.join(shots, `console-${name}.png`), fullPage: true });
}

async function signIn(page, who) {
  await page.goto(base + '/');
  assert.match(page.url(), /\/login$/, 'an unsigned visit goes to the sign-in page');
  await page.fill('#user', who.user);
  await page.fill('#password', who.pass);
  await Promise.all([page.waitForNavigation(), page.click('#sign-in')]);
  assert.strictEqual(await page.textContent('#who'), who.user, 'signed in as ' + who.user);
}

async function signOut(page) {
  await Promise.all([page.waitForNavigation(), page.click('header form.who button')]);
}

// The groups page: { depth text, rows: [{id, count, sample}] }.
async function groups(page) {
  await page.goto(base + '/');
  const depth = await page.textContent('#dlq-depth');
  const rows = await page.$$eval('#groups tbody tr:not(.other)', (trs) =>
    trs.map((tr) => ({
      id: tr.querySelector('a.group').textContent,
      count: Number(tr.querySelector('td.count').textContent),
      sample: tr.querySelector('td.error-text').firstChild.textContent,
    })));
  return { depth, rows };
}

async function groupOf(page, sampleTest) {
  const g = await groups(page);
  const row = g.rows.find((r) => sampleTest(r.sample));
  assert.ok(row, 'a group whose sample matches: ' + JSON.stringify(g.rows));
  return row;
}

// Waits for the job page's live state (polled by the page's own script),
// through a locator: nothing here may depend on a string evaluated in the
// page, which the console's CSP refuses (wait.js).
async function jobState(page) {
  return waitForText(page, '#state', 'running', 60000);
}

async function main() {
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM,
    args: ['--no-sandbox'], // root in CI: chromium's sandbox needs a user namespace
  });
  const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  const page = await context.newPage();
  // An injected script would open a dialog: any dialog fails the test.
  page.on('dialog', (d) => { throw new Error('a dialog opened: ' + d.message()); });
  const cspViolations = [];
  page.on('console', (m) => { if (/Content Security Policy/.test(m.text())) cspViolations.push(m.text()); });

  // ---- the read-only user: sees, previews, is refused the run ----------
  await page.goto(base + '/login');
  await shot(page, 'login');
  await signIn(page, ro);
  let g = await groups(page);
  assert.strictEqual(g.rows.length, 2, 'two failure groups: ' + JSON.stringify(g.rows));
  assert.match(g.depth, new RegExp(`^${total} items`), g.depth);
  const tgroup = await groupOf(page, (s) => s.includes('timeout calling crm-api'));
  assert.strictEqual(tgroup.count, timeouts);
  await page.goto(base + '/group?group=' + tgroup.id);
  await Promise.all([page.waitForNavigation(), page.click('#preview-replay')]);
  assert.match(await page.textContent('#preview-summary'), new RegExp(`would replay ${timeouts},`));
  await Promise.all([page.waitForNavigation(), page.click('#run')]);
  assert.strictEqual(await jobState(page), 'failed', 'the broker refuses the read-only replay');
  const refusal = await page.textContent('#job-error');
  assert.match(refusal, /ACCESS_REFUSED|access refused|permission/i, refusal);
  g = await groups(page);
  assert.match(g.depth, new RegExp(`^${total} items`), 'nothing moved: ' + g.depth);
  await signOut(page);

  // ---- the operator ----------------------------------------------------
  await signIn(page, op);
  g = await groups(page);
  await shot(page, 'groups');
  // A hostile last_error is text, in the list, on the group page and the item page.
  const sgroup = await groupOf(page, (s) => s.includes('script'));
  // The bridge stamps a worker's report as "worker error: TEXT".
  const hostile = 'worker error: <script>alert(1)</script>';
  assert.strictEqual(sgroup.sample, hostile);
  assert.strictEqual(sgroup.count, scripts);
  await page.goto(base + '/group?group=' + sgroup.id);
  const errs = await page.$$eval('#items td.last-error', (tds) => tds.map((td) => td.textContent));
  assert.deepStrictEqual(errs, Array(scripts).fill(hostile));
  // gdpr_art_17 has a month from receipt: days and hours left, none overdue.
  const lefts = await page.$$eval('#items td.left', (tds) => tds.map((td) => td.textContent));
  assert.strictEqual(lefts.length, scripts);
  for (const l of lefts) assert.match(l, /^(2[89]|3[01])d\d+h$/, 'time left: ' + l);
  assert.strictEqual(await page.$$eval('main script', (s) => s.length), 0, 'no script element from a message');
  await Promise.all([page.waitForNavigation(), page.click('#items tbody tr a')]);
  const envelope = await page.textContent('#envelope');
  assert.ok(envelope.includes(hostile), 'the item page shows it as text');
  // Its audit history as `audit show` prints it, from the verified trail.
  assert.match(await page.textContent('#audit'), /dead_lettered +dsr\.failed -> dsr\.dlq\.manual +attempt 1/);
  assert.strictEqual(await page.$$eval('main script', (s) => s.length), 0);
  await shot(page, 'item');

  // Without the CSRF token (the session cookie goes along): refused, nothing moves.
  for (const action of ['/preview', '/run']) {
    const res = await page.request.post(base + action, {
      form: { action: 'replay', group: tgroup.id, rate: '10' },
      maxRedirects: 0,
    });
    assert.strictEqual(res.status(), 403, action + ' without a CSRF token');
    assert.match(await res.text(), /CSRF/);
  }
  const wrong = await page.request.post(base + '/run', {
    form: { csrf: 'f'.repeat(64), action: 'replay', group: tgroup.id }, maxRedirects: 0,
  });
  assert.strictEqual(wrong.status(), 403, 'a wrong CSRF token');
  g = await groups(page);
  assert.match(g.depth, new RegExp(`^${total} items`), 'nothing moved: ' + g.depth);

  // Preview, then run the group's replay at a chosen rate, with live progress.
  await page.goto(base + '/group?group=' + tgroup.id);
  await shot(page, 'group');
  await Promise.all([page.waitForNavigation(), page.click('#preview-replay')]);
  assert.match(await page.textContent('#preview-summary'),
    new RegExp(`^dry run: would replay ${timeouts}, would skip as complete 0, would leave ${scripts} of ${total}$`));
  assert.strictEqual(await page.$$eval('#preview tbody tr', (t) => t.length), timeouts);
  await shot(page, 'preview');
  await page.fill('#rate', '20');
  await Promise.all([page.waitForNavigation(), page.click('#run')]);
  assert.match(page.url(), /\/job\?id=\d+$/);
  assert.strictEqual(await jobState(page), 'done', await page.textContent('#job-error'));
  const summary = await page.textContent('#summary');
  assert.strictEqual(summary, `replayed ${timeouts}, skipped as complete 0, left ${scripts} of ${total} in dsr.dlq.manual`);
  assert.strictEqual(await page.textContent('#moved'), String(timeouts));
  await shot(page, 'job');
  // What the page's script polls says the same.
  const jobId = new URL(page.url()).searchParams.get('id');
  const j = await (await page.request.get(base + '/job.json?id=' + jobId)).json();
  assert.deepStrictEqual([j.state, j.moved, j.total, j.summary], ['done', timeouts, total, summary]);
  // The job survives a reload (it lives in the console, not the page).
  await page.reload();
  assert.strictEqual(await page.textContent('#state'), 'done');
  assert.strictEqual(await page.textContent('#summary'), summary);

  // The broker's queue changed: only the script group is left.
  g = await groups(page);
  assert.match(g.depth, new RegExp(`^${scripts} items in dsr.dlq.manual, in 1 groups`), g.depth);
  assert.deepStrictEqual(g.rows.map((r) => r.id), [sgroup.id]);
  // The review inbox: escalate one checked script item (preview, run), claim
  // it in the inbox, and return it to the DLQ.
  await page.goto(base + '/group?group=' + sgroup.id);
  await page.check('#items tbody tr:first-child input.pick');
  await page.fill('#note', 'needs a <b>person</b>');
  await Promise.all([page.waitForNavigation(), page.click('#preview-escalate')]);
  assert.match(await page.textContent('#preview-summary'), /^dry run: would escalate 1, would leave/);
  assert.strictEqual(await page.$$eval('#preview tbody tr', (t) => t.length), 1, 'only the checked item');
  await Promise.all([page.waitForNavigation(), page.click('#run')]);
  assert.strictEqual(await jobState(page), 'done', await page.textContent('#job-error'));
  await page.goto(base + '/review');
  assert.match(await page.textContent('#review-count'), /^1 items wait in compliance_review, 1 unclaimed/);
  assert.ok((await page.textContent('#review')).includes('needs a <b>person</b>'), 'the note as text');
  await shot(page, 'review');
  await Promise.all([page.waitForNavigation(), page.click('#review button:text("Claim")')]);
  assert.match(await page.textContent('#review-result'), /^Done: claimed/);
  await page.goto(base + '/review');
  assert.match(await page.textContent('#review-count'), /0 unclaimed/);
  await Promise.all([page.waitForNavigation(), page.click('#review button:text("Decide: return to the DLQ")')]);
  assert.match(await page.textContent('#review-result'), /^Done: decided_return/);
  await page.goto(base + '/review');
  assert.match(await page.textContent('#review-count'), /^0 items wait/);
  g = await groups(page);
  assert.match(g.depth, new RegExp(`^${scripts} items in dsr.dlq.manual`), g.depth);

  assert.deepStrictEqual(cspViolations, [], 'no CSP violation');

  // Last (it locks this address out for a minute): five failed sign-ins,
  // then even the right password is refused with 429.
  const fresh = await browser.newContext();
  for (let i = 0; i < 5; i++) {
    const res = await fresh.request.post(base + '/login', { form: { user: op.user, password: 'wrong' } });
    assert.strictEqual(res.status(), 403, 'failed sign-in ' + (i + 1));
    assert.ok(!(await res.text()).includes('wrong'), 'the password is not echoed');
  }
  const locked = await fresh.request.post(base + '/login', { form: { user: op.user, password: op.pass }, maxRedirects: 0 });
  assert.strictEqual(locked.status(), 429, 'the sixth sign-in within the minute');
  await fresh.close();
  await browser.close();
}

main().catch((e) => {
  console.error('console.spec.js: ' + (e && e.stack ? e.stack : e));
  process.exit(1);
});
