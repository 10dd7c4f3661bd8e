// Waiting for a page's own script in the console's pages, whose
// Content-Security-Policy (script-src 'self') refuses any string evaluated as
// script. page.waitForFunction hands its predicate to the page as source
// text; with playwright-core 1.49.1 on the console's job page that failed
// with "EvalError: Evaluating a string as JavaScript violates the following
// Content Security Policy directive" (whether it does depends on the version
// and on how it polls), so the tests wait through a locator instead, which
// playwright matches from its own injected script, the same in every version.
'use strict';

// Waits until the element SELECTOR exists with a text other than WHILE
// (e.g. a job's state other than "running") and returns that text.
async function waitForText(page, selector, whileText, timeout) {
  const el = page.locator(selector).filter({ hasNotText: new RegExp('^' + whileText.replace(/[.*+?^${}()|[\]\\]/g, '\\$&') + '$') });
  await el.waitFor({ state: 'attached', timeout });
  return el.textContent();
}

module.exports = { waitForText };
