// The console's actions across its restarts, in a real browser (run by
// tests/console/test_console.c, test_console_jobs_survive_restarts, once
// per console it starts: the restarts, SIGTERM and SIGKILL, happen between
// two runs of this script). Each run signs in (sessions do not outlive a
// console), then:
//   CHECK  (JSON array) the jobs a restarted console must show, each
//          {id, state, total, examined, moved, removed[, summary][, error]}
//          (error: a regular expression): on /jobs and on /job?id=N, the
//          page and /job.json agreeing; no Stop button unless running; and
//          for an interrupted one a Stop posted anyway changes nothing;
//   RUN    (JSON object, optional) {picks, rate, wait}: a replay of the
//          first group (only its first `picks` items when picks > 0) at
//          `rate`, previewed, then run; wait "done" waits for its end,
//          "running" only for its page. Its id, state and summary go to
//          the file OUT as JSON.
// Exits non-zero with one line saying what failed.
'use strict';
const { chromium } = require('playwright-core');
const assert = require('assert');
const fs = require('fs');
const { waitForText } = require('./wait');

const base = process.env.CONSOLE_URL;
const op = { user: process.env.OP_USER, pass: process.env.OP_PASS };
const checks = JSON.parse(process.env.CHECK || '[]');
const run = process.env.RUN ? JSON.parse(process.env.RUN) : null;

async function signIn(page) {
  await page.goto(base + '/login');
  await page.fill('#user', op.user);
  await page.fill('#password', op.pass);
  await Promise.all([page.waitForNavigation(), page.click('#sign-in')]);
  assert.strictEqual(await page.textContent('#who'), op.user, 'signed in');
}

async function count(page, id) {
  return Number(await page.textContent('#' + id));
}

async function checkJob(page, want) {
  const what = `job ${want.id}`;
  // The list of actions.
  await page.goto(base + '/jobs');
  const row = page.locator('#jobs tbody tr', { has: page.locator(`a[href="/job?id=${want.id}"]`) });
  assert.strictEqual(await row.count(), 1, what + ' is listed on /jobs');
  assert.strictEqual(await row.locator('td.state').textContent(), want.state, what + ' state on /jobs');
  // Its page.
  await page.goto(base + '/job?id=' + want.id);
  assert.strictEqual(await page.textContent('#state'), want.state, what + ' state');
  const shown = {
    total: await count(page, 'total'), examined: await count(page, 'examined'),
    moved: await count(page, 'moved'), removed: await count(page, 'removed'),
  };
  assert.deepStrictEqual(shown, { total: want.total, examined: want.examined, moved: want.moved,
    removed: want.removed }, what + ' counts');
  if (want.summary !== undefined) assert.strictEqual(await page.textContent('#summary'), want.summary, what + ' summary');
  const error = await page.textContent('#job-error');
  if (want.error !== undefined) assert.match(error, new RegExp(want.error), what + ' error line');
  assert.strictEqual(await page.locator('#stop').count(), want.state === 'running' ? 1 : 0,
    what + ': a Stop button only while running');
  // What the page's script polls says the same.
  const j = await (await page.request.get(base + '/job.json?id=' + want.id)).json();
  assert.deepStrictEqual([j.state, j.total, j.examined, j.moved, j.removed, j.error],
    [want.state, want.total, want.examined, want.moved, want.removed, error], what + ' json');
  if (want.state === 'interrupted') {
    // Cut short is final: a Stop posted anyway neither resumes nor changes it.
    const csrf = await page.getAttribute('header form.who input[name=csrf]', 'value');
    const res = await page.request.post(base + '/stop', { form: { csrf, id: String(want.id) }, maxRedirects: 0 });
    assert.strictEqual(res.status(), 303, what + ': /stop answers');
    await page.reload();
    assert.strictEqual(await page.textContent('#state'), 'interrupted', what + ' stays interrupted');
  }
}

async function runReplay(page) {
  await page.goto(base + '/');
  const group = await page.textContent('#groups tbody tr:not(.other) a.group');
  await page.goto(base + '/group?group=' + group);
  for (let i = 1; i <= run.picks; i++) await page.check(`#items tbody tr:nth-child(${i}) input.pick`);
  await Promise.all([page.waitForNavigation(), page.click('#preview-replay')]);
  await page.fill('#rate', run.rate);
  await Promise.all([page.waitForNavigation(), page.click('#run')]);
  assert.match(page.url(), /\/job\?id=\d+$/);
  const id = Number(new URL(page.url()).searchParams.get('id'));
  let state = await page.textContent('#state');
  if (run.wait === 'done') state = await waitForText(page, '#state', 'running', 60000);
  else assert.strictEqual(state, 'running', 'the replay runs');
  assert.strictEqual(state, run.wait, await page.textContent('#job-error'));
  const summary = await page.textContent('#summary');
  fs.writeFileSync(process.env.OUT, JSON.stringify({ id, state, summary }));
}

async function main() {
  const browser = await chromium.launch({ executablePath: process.env.CHROMIUM, args: ['--no-sandbox'] });
  const page = await (await browser.newContext()).newPage();
  page.on('dialog', (d) => { throw new Error('a dialog opened: ' + d.message()); });
  await signIn(page);
  for (const want of checks) await checkJob(page, want);
  if (run) await runReplay(page);
  await browser.close();
}

main().catch((e) => {
  console.error('jobs.spec.js: ' + (e && e.stack ? e.stack : e));
  process.exit(1);
});
