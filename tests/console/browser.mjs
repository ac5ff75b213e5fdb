// The console in a real browser: Debian's Chromium (/usr/bin/chromium) driven by playwright-core
// through executablePath (no browser download), axe-core run in every page. Driven by
// tests/it/console.rs, which prepares the server and checks what this prints (one JSON object).
//
// Usage: TRELLIS_NODE_MODULES=target/console-deps/node_modules node browser.mjs CONFIG_JSON
// CONFIG: { base, admin: {email, password}, approver: {email, password}, workspace, requestId, search, scanTarget,
//           deviceId, pluginV1, pluginV2 (component paths), screenshots?: directory for one PNG per page }
import { join } from 'node:path';
import { readFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';

const config = JSON.parse(process.argv[2]);
const modules = process.env.TRELLIS_NODE_MODULES;
const { chromium } = await import(pathToFileURL(join(modules, 'playwright-core', 'index.mjs')).href);
const axeSource = readFileSync(join(modules, 'axe-core', 'axe.min.js'), 'utf8');

const out = { numbers: {}, violations: {}, csp: [], steps: [] };
const browser = await chromium.launch({
  executablePath: '/usr/bin/chromium',
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking',
    '--disable-component-update', '--disable-sync'],
});

/// axe-core in the page (evaluated over the DevTools protocol, which the page's CSP does not
/// govern); keeps the serious and critical violations by page name.
async function audit(page, name) {
  await page.evaluate(axeSource);
  const result = await page.evaluate(async () => {
    const r = await window.axe.run(document, { resultTypes: ['violations'] });
    return r.violations.filter((v) => v.impact === 'serious' || v.impact === 'critical')
      .map((v) => ({ id: v.id, impact: v.impact, nodes: v.nodes.map((n) => n.target.join(' ')).slice(0, 5) }));
  });
  out.violations[name] = result;
  if (config.screenshots) {
    await page.screenshot({ path: join(config.screenshots, `${name}.png`), fullPage: true });
  }
}

async function signIn(page, who) {
  await page.goto(`${config.base}/login`);
  await page.fill('#email', who.email);
  await page.fill('#password', who.password);
  await Promise.all([page.waitForURL(`${config.base}/`), page.click('button[type="submit"]')]);
}

async function newPage(context) {
  const page = await context.newPage();
  page.setDefaultTimeout(20000);
  // A CSP refusal shows up as a console error: any is a failure of the page.
  page.on('console', (m) => { if (/Content Security Policy/i.test(m.text())) out.csp.push(m.text()); });
  return page;
}

try {
  const context = await browser.newContext({ acceptDownloads: true, viewport: { width: 1280, height: 900 } });
  const page = await newPage(context);
  await page.goto(`${config.base}/login`);
  await audit(page, 'login');
  await signIn(page, config.admin);
  out.steps.push('signed in');
  for (const id of ['count-total', 'count-active', 'count-expiring', 'count-expired', 'count-revoked', 'within-7', 'within-30']) {
    out.numbers[id] = Number((await page.locator(`#${id}`).innerText()).trim());
  }
  await audit(page, 'dashboard');

  // The inventory, filtered live (htmx swaps the results and pushes the URL).
  await page.goto(`${config.base}/certificates`);
  await page.fill('#search', config.search);
  await page.press('#search', 'Enter');
  await page.waitForURL(/search=/);
  await page.waitForFunction((s) => [...document.querySelectorAll('table.inventory tbody th')].every((c) => c.innerText.includes(s)), config.search);
  out.filtered = await page.locator('table.inventory tbody th').allInnerTexts();
  await audit(page, 'certificates');
  // Sorted by expiry, soonest first: a live change of the sort keeps the search.
  await page.selectOption('#sort', 'expiresAt');
  await page.waitForURL(/sort=expiresAt/);
  await page.waitForSelector('table.inventory th[aria-sort="ascending"]');
  out.sorted = await page.locator('table.inventory tbody th').allInnerTexts();

  // Issue from the form, then download the certificate.
  await page.goto(`${config.base}/issue`);
  await audit(page, 'issue');
  await page.fill('#commonName', 'web.console.example');
  await page.fill('#names', 'web.console.example');
  // The result page: what was issued and its downloads; then on to the certificate's page.
  await Promise.all([page.waitForURL(/\/issue\/issued\/\d+$/), page.click('button[type="submit"].primary')]);
  out.issuedUrl = page.url();
  const [download] = await Promise.all([page.waitForEvent('download'), page.click('text=Certificate (PEM)')]);
  out.downloaded = readFileSync(await download.path(), 'utf8').split('\n')[0];
  await audit(page, 'issue-result');
  await Promise.all([page.waitForURL(/\/certificates\/\d+$/), page.click('#certificate-link')]);
  await audit(page, 'certificate');

  // Revoke it with a reason.
  await page.selectOption('#reason', 'superseded');
  await Promise.all([page.waitForURL(/done=revoked/), page.click('button.danger:text("Revoke")')]);
  out.revoked = (await page.locator('#revoked').innerText()).trim();
  out.steps.push('revoked');

  // The CA filter: only what the form issued through Console Root.
  await page.goto(`${config.base}/certificates`);
  await page.selectOption('#caId', { label: 'Console Root' });
  await page.waitForURL(/caId=\d+/);
  await page.waitForFunction(() => {
    const names = [...document.querySelectorAll('table.inventory tbody th')].map((c) => c.innerText);
    return names.length > 0 && names.every((n) => n.includes('console.example'));
  });
  out.byCa = await page.locator('table.inventory tbody th').allInnerTexts();

  // The administration pages: a CA with its test run again, the audit log, a new API key
  // (shown once), members.
  await page.goto(`${config.base}/cas`);
  await audit(page, 'cas');
  await Promise.all([page.waitForURL(/\/cas\/\d+$/), page.click('table a')]);
  await Promise.all([page.waitForURL(/\/cas\/\d+\/test$/), page.click('text=Run the test')]);
  out.caTest = (await page.locator('#test-result').innerText()).trim();
  await audit(page, 'ca');
  await page.goto(`${config.base}/audit?action=certificate.revoked`);
  out.auditRows = await page.locator('tbody tr').count();
  await audit(page, 'audit');
  await page.goto(`${config.base}/api-keys`);
  await page.fill('#key-name', 'from the console');
  await page.fill('#key-scopes', 'certificates:read');
  await Promise.all([page.waitForLoadState('load'), page.click('text=Create the key')]);
  out.newKey = await page.locator('#new-key').inputValue();
  await audit(page, 'api-keys');
  await page.goto(`${config.base}/members`);
  await audit(page, 'members');
  await page.goto(`${config.base}/events-out`);
  await audit(page, 'events-out');
  await page.goto(`${config.base}/plugins`);
  await audit(page, 'plugins');
  await page.goto(`${config.base}/attestation`);
  await audit(page, 'attestation');
  // A device's history, with the reason its attestation failed.
  await Promise.all([page.waitForURL(/\/attestation\/devices\/\d+$/), page.click(`a[href="/attestation/devices/${config.deviceId}"]`)]);
  out.deviceFailure = (await page.locator('tr.failed ul.reasons li').first().innerText()).trim();
  await audit(page, 'device');

  // Upload a plugin version (activated: newer), then a second one stored only, then activate it.
  await page.goto(`${config.base}/plugins`);
  await page.setInputFiles('#component', config.pluginV1);
  await Promise.all([page.waitForURL(/\/plugins\/upload$/), page.click('button[type="submit"]:text("Upload")')]);
  out.pluginUploaded = (await page.locator('#plugin-notice').innerText()).trim();
  await page.goto(`${config.base}/plugins`);
  await page.setInputFiles('#component', config.pluginV2);
  await page.selectOption('#activate', 'never');
  await Promise.all([page.waitForURL(/\/plugins\/upload$/), page.click('button[type="submit"]:text("Upload")')]);
  await audit(page, 'plugin-upload');
  await Promise.all([page.waitForURL(/\/activate$/),
    page.click('form[action="/plugins/trellis.fixture.upgrade/versions/2.0.0/activate"] button')]);
  out.pluginActivated = (await page.locator('#plugin-notice').innerText()).trim();

  // A CA created from the form generated from its connector's schema: a number the form cannot
  // read is refused on its field, then the CA is created and its page opens.
  await page.goto(`${config.base}/cas/new`);
  await page.selectOption('#type', 'internal');
  await Promise.all([page.waitForURL(/\/cas\/new\?type=internal$/), page.click('text=Continue')]);
  await page.fill('#name', 'Console root');
  await page.fill('#config-subject-commonName', 'Console Root CA');
  await page.selectOption('#config-keyAlgorithm', 'ecdsa-p384');
  // The number input refuses letters in the browser; an out-of-range number reaches the
  // connector's validation, whose refusal lands on the field.
  await page.fill('#config-validityDays', '0');
  await page.evaluate(() => document.querySelector('#config-validityDays').removeAttribute('min'));
  await Promise.all([page.waitForLoadState('load'), page.click('text=Create the CA')]);
  out.caRefused = (await page.locator('#ca-error').innerText()).trim();
  await audit(page, 'ca-form');
  await page.fill('#config-validityDays', '400');
  await Promise.all([page.waitForURL(/\/cas\/\d+\?done=saved$/), page.click('text=Create the CA')]);
  out.caCreated = (await page.locator('h1').innerText()).trim();

  // A second person approves the pending request.
  const second = await newPage(await browser.newContext({ viewport: { width: 1280, height: 900 } }));
  await signIn(second, config.approver);
  // The approver's own workspace opens first: the switcher moves to the shared one.
  await second.selectOption('#workspace-switch', config.workspace);
  await Promise.all([second.waitForURL(`${config.base}/`), second.click('.switcher button[type="submit"]')]);
  await second.goto(`${config.base}/requests`);
  await audit(second, 'requests');
  await Promise.all([second.waitForURL(/done=approved/), second.click(`button[aria-label="Approve issuance request ${config.requestId}"]`)]);
  out.steps.push('approved');

  // Start a scan and watch its progress reach the end (the scan page polls itself with htmx).
  await second.goto(`${config.base}/discovery`);
  await audit(second, 'discovery');
  await second.fill('#targets', config.scanTarget);
  await Promise.all([second.waitForURL(/\/discovery\/\d+$/), second.click('button[type="submit"].primary')]);
  await second.waitForFunction(() => document.querySelector('#scan-status')?.innerText.trim() === 'completed', null, { timeout: 30000 });
  out.scan = {
    percent: await second.locator('#scan-bar').getAttribute('value'),
    found: Number((await second.locator('#scan-found').innerText()).trim()),
    // What it found, as the table lists it (name, then new or already known).
    findings: await second.locator('table.findings tbody tr').evaluateAll((rows) => rows.map((r) => r.innerText.split('\t').slice(0, 2).join(' | '))),
  };
  await audit(second, 'scan');
} catch (err) {
  out.error = String(err && err.stack || err);
} finally {
  await browser.close();
}
console.log(JSON.stringify(out));
