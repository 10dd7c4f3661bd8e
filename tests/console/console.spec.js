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
const op2 = { user: process.env.OP2_USER, pass: process.env.OP2_PASS };
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
  // A bad filter names the page's field, not the CLI's flag (--group).
  const bad = await page.goto(base + '/group?group=zzzz');
  assert.strictEqual(bad.status(), 400);
  const badText = await page.textContent('#error');
  assert.match(badText, /^group: 'zzzz' is not a group id/, badText);
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
  assert.match(await page.textContent('#review-count'), /^1 item waits in compliance_review, 1 unclaimed/);
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

  // ---- an edit with its preview, proposed, approved by a second user ----
  await page.goto(base + '/group?group=' + sgroup.id);
  await Promise.all([page.waitForNavigation(), page.click('#items tbody tr a')]);
  const editItem = new URL(page.url()).searchParams.get('message-id');
  await page.fill('#edit-set', 'legal_basis=gdpr_art_15\nticket=<b>T-1</b>');
  await page.fill('#edit-note', 'the subject asked for access, not erasure');
  await Promise.all([page.waitForNavigation(), page.click('#edit-preview')]);
  assert.match(await page.textContent('#edit-result'), /^Preview of edit e-[0-9a-f]{32} of .*Nothing moved\.$/);
  const rows = await page.$$eval('#edit-preview-table tbody tr', (trs) =>
    trs.map((tr) => Array.from(tr.children).map((td) => td.textContent)));
  assert.deepStrictEqual(rows, [['legal_basis', 'gdpr_art_17', 'gdpr_art_15'],
    ['ticket', 'absent', '<b>T-1</b>']], 'before and after, as text');
  assert.match(await page.textContent('#edit-body'), /^body: \d+ bytes sha256 [0-9a-f]{64} \(unchanged\)$/);
  assert.strictEqual(await page.textContent('#edit-valid'), 'valid under profile dsr');
  assert.strictEqual(await page.$$eval('main b', (b) => b.length), 0, 'no markup from an edit');
  await shot(page, 'edit-preview');
  await page.goto(base + '/item?message-id=' + encodeURIComponent(editItem));
  await page.fill('#edit-set', 'legal_basis=gdpr_art_15\nticket=<b>T-1</b>');
  await page.fill('#edit-note', 'the subject asked for access, not erasure');
  await Promise.all([page.waitForNavigation(), page.click('#edit-run')]);
  const proposed = await page.textContent('#edit-result');
  assert.match(proposed, /^Proposed edit (e-[0-9a-f]{32}): it waits in dsr\.dlq\.manual/);
  const editId = proposed.match(/e-[0-9a-f]{32}/)[0];
  await page.goto(base + '/review');
  assert.match(await page.textContent('#edits-count'), /^1 edits wait in dsr\.dlq\.manual/);
  assert.strictEqual(await page.textContent('#edits td.proposer'), op.user);
  assert.strictEqual(await page.$$eval('#edits button.approve', (b) => b.length), 0,
    'no Approve on one\'s own proposal');
  // Posted anyway: the proposer's own approval is refused, nothing moves.
  const csrf = await page.getAttribute('#edits input[name=csrf]', 'value');
  const own = await page.request.post(base + '/edit/decide', {
    form: { csrf, proposal: editId, kind: 'approve' }, maxRedirects: 0,
  });
  assert.strictEqual(own.status(), 409);
  assert.match(await own.text(), /the proposer cannot approve their own edit/);
  await shot(page, 'edit-inbox');
  await signOut(page);
  await signIn(page, op2);
  await page.goto(base + '/review');
  assert.strictEqual(await page.textContent('#edits td.edit-id'), editId);
  await Promise.all([page.waitForNavigation(), page.click('#edits button.approve')]);
  assert.strictEqual(await page.textContent('#edit-result'),
    `Done: edit ${editId} approved by ${op2.user} (proposed by ${op.user}): dsr.dlq.manual -> dsr.work.`);
  await page.goto(base + '/review');
  assert.match(await page.textContent('#edits-count'), /^0 edits wait/);
  g = await groups(page);
  assert.match(g.depth, new RegExp(`^${scripts - 1} items in dsr.dlq.manual`), g.depth);

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
