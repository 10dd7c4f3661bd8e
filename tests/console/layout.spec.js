// The console on the on-call phone (run by test_console_fits_a_phone in
// tests/console/test_console.c, which fills the DLQ with items whose ids,
// source system and last error are long single words with markup in them).
// Each page (groups, group, item, preview, job, inbox, edit) at 390 x 844 and
// at 1280 x 800: the page is no wider than its viewport, no element cuts off
// what it holds, every id and the sample error lie inside the screen and are
// there whole, as text; a screenshot of each at each size goes to SHOTS.
// While a replay runs at 10 a second, the job's counts are sampled from
// /job.json every 100 ms into OUT, for the C side to hold against the
// broker. Exits non-zero with one line saying what failed.
'use strict';
const { chromium } = require('playwright-core');
const assert = require('assert');
const fs = require('fs');
const path = require('path');
const { waitForText } = require('./wait');

const base = process.env.CONSOLE_URL;
const op = { user: process.env.OP_USER, pass: process.env.OP_PASS };
const values = JSON.parse(fs.readFileSync(process.env.VALUES, 'utf8'));
const shots = process.env.SHOTS;
const out = process.env.OUT;
const sizes = [{ name: 'phone', width: 390, height: 844 }, { name: 'desktop', width: 1280, height: 800 }];

// What the page shows that must fit: the page's width, every element that
// hides overflow and holds more than it shows, and where each text of
// `wanted` lies (every occurrence inside the viewport's width).
function measure(wanted) {
  const vw = document.documentElement.clientWidth;
  const cut = [];
  for (const el of document.querySelectorAll('body *')) {
    const cs = getComputedStyle(el);
    if (cs.display === 'none' || cs.overflowX === 'visible') continue;
    if (el.scrollWidth > el.clientWidth + 1) cut.push(`${el.tagName.toLowerCase()}#${el.id}.${el.className} (${el.scrollWidth} > ${el.clientWidth})`);
  }
  const found = {};
  const outside = [];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  const texts = [];
  for (let n = walker.nextNode(); n; n = walker.nextNode()) texts.push(n);
  for (const w of wanted) {
    found[w] = 0;
    for (const n of texts) {
      const at = n.data.indexOf(w);
      if (at < 0) continue;
      if (n.parentElement.closest('thead, [hidden]')) continue;
      found[w]++;
      const r = document.createRange();
      r.setStart(n, at);
      r.setEnd(n, at + w.length);
      for (const b of r.getClientRects()) {
        if (b.width > 0 && (b.left < -0.5 || b.right > vw + 0.5)) {
          outside.push(`${w.slice(0, 24)}... at ${Math.round(b.left)}..${Math.round(b.right)} of ${vw}`);
          break;
        }
      }
    }
  }
  return { vw, width: document.scrollingElement.scrollWidth, cut, found, outside };
}

// Holds the page at both sizes: `wanted` are texts it must show whole.
async function fits(page, name, wanted) {
  for (const s of sizes) {
    await page.setViewportSize({ width: s.width, height: s.height });
    const m = await page.evaluate(measure, wanted);
    const where = `${name} at ${s.width}x${s.height}`;
    assert.ok(m.width <= m.vw, `${where}: the page is ${m.width} px wide in a ${m.vw} px viewport`);
    assert.deepStrictEqual(m.cut, [], `${where}: elements that cut off what they hold`);
    assert.deepStrictEqual(m.outside, [], `${where}: text off the screen`);
    for (const w of wanted) assert.ok(m.found[w] > 0, `${where}: '${w.slice(0, 40)}...' is not on the page whole`);
    await page.screenshot({ path: path.join(shots, `${s.name}-${name}.png`), fullPage: true });
  }
  await page.setViewportSize({ width: sizes[0].width, height: sizes[0].height });
}

async function main() {
  fs.mkdirSync(shots, { recursive: true });
  const browser = await chromium.launch({ executablePath: process.env.CHROMIUM, args: ['--no-sandbox'] });
  const context = await browser.newContext({ viewport: { width: 390, height: 844 } });
  const page = await context.newPage();
  page.on('dialog', (d) => { throw new Error('a dialog opened: ' + d.message()); });

  await page.goto(base + '/login');
  await fits(page, 'login', []);
  await page.fill('#user', op.user);
  await page.fill('#password', op.pass);
  await Promise.all([page.waitForNavigation(), page.click('#sign-in')]);
  assert.strictEqual(await page.textContent('#who'), op.user);

  // The groups page: one group; its sample error is the hostile one, whole.
  await page.goto(base + '/');
  const groupId = await page.textContent('#groups a.group');
  await fits(page, 'groups', [groupId, values.error, values.source]);

  // The group page: every id in full.
  await page.goto(base + '/group?group=' + encodeURIComponent(groupId));
  await fits(page, 'group', [values.ids[0], values.ids[values.ids.length - 1], values.error]);

  // The item page: the envelope and the audit history.
  await page.goto(base + '/item?message-id=' + encodeURIComponent(values.ids[0]));
  await fits(page, 'item', [values.ids[0], values.error, values.source]);

  // An edit of the first item: its preview (the edit page), then proposed.
  await page.fill('#edit-set', 'ticket=' + values.ticket);
  await page.fill('#edit-note', values.note);
  await Promise.all([page.waitForNavigation(), page.click('#edit-preview')]);
  assert.match(await page.textContent('#edit-result'), /^Preview of edit e-[0-9a-f]{32} of /);
  await fits(page, 'edit', [values.ids[0], values.ticket]);
  await page.goto(base + '/item?message-id=' + encodeURIComponent(values.ids[0]));
  await page.fill('#edit-set', 'ticket=' + values.ticket);
  await page.fill('#edit-note', values.note);
  await Promise.all([page.waitForNavigation(), page.click('#edit-run')]);
  assert.match(await page.textContent('#edit-result'), /^Proposed edit e-[0-9a-f]{32}/);

  // The second item escalated with a long note: the preview, the job.
  await page.goto(base + '/group?group=' + encodeURIComponent(groupId));
  const picks = await page.$$eval('#items input.pick', (els) => els.map((e) => e.value));
  assert.ok(picks.includes(values.ids[1]), 'the second item is listed');
  await page.locator('#items input.pick').nth(picks.indexOf(values.ids[1])).check();
  await page.fill('#note', values.note);
  await Promise.all([page.waitForNavigation(), page.click('#preview-escalate')]);
  assert.match(await page.textContent('#preview-summary'), /^dry run: would escalate 1, /);
  await fits(page, 'preview', [values.ids[1], values.error]);
  await Promise.all([page.waitForNavigation(), page.click('#run')]);
  assert.strictEqual(await waitForText(page, '#state', 'running', 60000), 'done', await page.textContent('#job-error'));

  // The inbox: the escalated item and the proposed edit.
  await page.goto(base + '/review');
  assert.match(await page.textContent('#review-count'), /^1 item waits/);
  assert.match(await page.textContent('#edits-count'), /^1 edits wait/);
  await fits(page, 'inbox', [values.ids[0], values.ids[1], values.note, values.ticket]);

  // The rest replayed at 10 a second. While it runs, /job.json every
  // 100 ms (the C side compares its moved with the broker's work queue);
  // the job page held to both sizes meanwhile and at its end.
  await page.goto(base + '/group?group=' + encodeURIComponent(groupId));
  await Promise.all([page.waitForNavigation(), page.click('#preview-replay')]);
  await page.fill('#rate', '10');
  await Promise.all([page.waitForNavigation(), page.click('#run')]);
  const jobId = new URL(page.url()).searchParams.get('id');
  const samples = [];
  const sampler = (async () => {
    for (;;) {
      const t = Date.now();
      const j = await (await page.request.get(base + '/job.json?id=' + jobId)).json();
      samples.push({ t, state: j.state, examined: j.examined, moved: j.moved });
      // Nothing read sits unaccounted for (issue 42: "moved: 0" for 4 s
      // while examined rose): what is not moved, removed or left is in flight.
      if (j.state === 'running')
        assert.ok(j.moved + j.removed + j.left_in_place + j.in_flight >= j.examined,
          'unaccounted: ' + JSON.stringify(j));
      if (j.state !== 'running') return;
      const rest = 100 - (Date.now() - t);
      if (rest > 0) await new Promise((r) => setTimeout(r, rest));
    }
  })();
  await fits(page, 'job-running', []);
  await sampler;
  assert.strictEqual(await waitForText(page, '#state', 'running', 60000), 'done', await page.textContent('#job-error'));
  await fits(page, 'job', [await page.textContent('#summary')]);
  fs.writeFileSync(out, JSON.stringify(samples));
  await browser.close();
}

main().catch((e) => {
  console.error('layout.spec.js: ' + (e && e.stack ? e.stack : e));
  process.exit(1);
});
