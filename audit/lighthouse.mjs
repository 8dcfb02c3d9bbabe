// Lighthouse over the portal's pages, signed in, with Debian's chromium: `node audit/lighthouse.mjs plan.json`.
//
// plan.json: {"base": "http://127.0.0.1:PORT", "cookies": [{"name", "value"}],
//             "pages": [{"name", "path", "signed_in", "status", "before"?}]}
// AUDIT_REPORTS=<dir> also writes each page's whole Lighthouse result there as <page>.json.
// A page with `before` (JavaScript that submits a form) is loaded first, then audited as the navigation
// that script starts (a Lighthouse user-flow navigation), so a form's error page is measured as people
// reach it. Prints one JSON line per page: its three scores (0-100) and the audits that cost points.
import { readFileSync, writeFileSync } from "node:fs";
import puppeteer from "puppeteer-core";
import { startFlow } from "lighthouse";

const plan = JSON.parse(readFileSync(process.argv[2], "utf8"));
const CATEGORIES = { accessibility: "a11y", "best-practices": "best_practices", performance: "perf" };
// Lighthouse's default run: a mid-range phone on a slow 4G network, simulated (Lantern), as PageSpeed does.
const config = {
  extends: "lighthouse:default",
  // Pages that poll (a running workload's live panel, its events) never fall network-quiet: stop waiting
  // for that after 15 s (the metrics come from the trace of the load itself).
  settings: { onlyCategories: Object.keys(CATEGORIES), maxWaitForLoad: 15000 },
};
// Lighthouse simulates a phone 4x slower than the host; on a host that is itself slow or busy (a low
// benchmark index in the output) its guidance is a smaller factor. AUDIT_CPU_MULTIPLIER=1 shows that effect;
// the figures are judged with the default.
if (process.env.AUDIT_CPU_MULTIPLIER) {
  config.settings.throttling = { cpuSlowdownMultiplier: Number(process.env.AUDIT_CPU_MULTIPLIER) };
}

const browser = await puppeteer.launch({
  executablePath: process.env.CHROME_PATH || "/usr/bin/chromium",
  headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
});
async function audit(target) {
  // A fresh profile per page: the cookie only where the page is seen signed in, nothing cached before.
  const context = await browser.createBrowserContext();
  try {
    const page = await context.newPage();
    const url = new URL(target.path, plan.base).href;
    if (target.signed_in) await page.setCookie(...plan.cookies.map((c) => ({ ...c, url: plan.base })));
    // A page that answers 400 (a form with errors) or 404 on purpose is audited all the same, and the
    // browser's note of that status is not counted as a console error (the accessibility gate's rule too).
    const expected = target.status !== 200;
    const settings = { ...config.settings, ignoreStatusCode: expected };
    const audits = expected
      ? [{ path: "errors-in-console", options: { ignoredPatterns: ["ERR_BLOCKED_BY_CLIENT.Inspector", `status of ${target.status} `] } }]
      : [];
    const flow = await startFlow(page, { config: { ...config, settings, audits }, name: target.name });
    if (target.before) {
      await page.goto(url, { waitUntil: "networkidle0" });
      await flow.navigate(async () => {
        // The script's own navigation ends its execution context: that rejection is the expected outcome.
        const submitted = page.evaluate(target.before).catch((error) => {
          if (!/context was destroyed|navigation/i.test(error.message)) throw error;
        });
        await Promise.all([page.waitForNavigation({ waitUntil: "load" }), submitted]);
      });
    } else {
      await flow.navigate(url);
    }
    const { steps } = await flow.createFlowResult();
    return steps[0].lhr;
  } finally {
    await context.close();
  }
}

try {
  for (const target of plan.pages) {
    console.error(`[audit] ${target.name}`);
    let lhr = await audit(target);
    // A trace Chrome failed to record (NO_NAVSTART and the like) is Lighthouse's own hiccup: once more.
    if (lhr.runtimeError) lhr = await audit(target);
    const result = {
      name: target.name,
      url: lhr.finalDisplayedUrl,
      error: lhr.runtimeError?.message || null,
      // Lighthouse's own measure of this machine's CPU during the run (a quiet desktop: ~1000 and up); the
      // simulated phone's times scale with it.
      benchmark_index: Math.round(lhr.environment?.benchmarkIndex || 0),
    };
    for (const [id, short] of Object.entries(CATEGORIES)) {
      const category = lhr.categories[id];
      result[short] = category && category.score !== null ? Math.round(category.score * 100) : null;
      result[`${short}_lost`] = (category?.auditRefs || [])
        .filter((ref) => ref.weight > 0)
        .map((ref) => lhr.audits[ref.id])
        .filter((audit) => audit && audit.score !== null && audit.score < 1)
        .map((audit) => `${audit.id}=${audit.score}`);
    }
    if (process.env.AUDIT_REPORTS) {
      writeFileSync(`${process.env.AUDIT_REPORTS}/${target.name}.json`, JSON.stringify(lhr));
    }
    console.log(JSON.stringify(result));
  }
} finally {
  await browser.close();
}
