// One OpenID Connect sign-in in a real browser: Debian's Chromium (/usr/bin/chromium), driven
// by playwright-core (npm, scripts/oidc-provider.sh) through executablePath, no browser download.
// Opens START_URL (Trellis's /api/auth/oidc/login?redirect=/api/auth/user), fills in the IdP's
// login form with LOGIN and gives consent, then prints the page it lands on (the user, as JSON)
// and the session cookie's attributes as the browser stored them.
//
// Usage: TRELLIS_NODE_MODULES=target/oidc-provider/node_modules node browser.mjs START_URL LOGIN
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

const [startUrl, login] = process.argv.slice(2);
const modules = process.env.TRELLIS_NODE_MODULES;
const { chromium } = await import(pathToFileURL(join(modules, 'playwright-core', 'index.mjs')).href);

const browser = await chromium.launch({
  executablePath: '/usr/bin/chromium',
  args: [
    '--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync',
  ],
});
try {
  const context = await browser.newContext();
  const page = await context.newPage();
  page.setDefaultTimeout(20000);
  await page.goto(startUrl);
  await page.fill('input[name="login"]', login);
  await page.fill('input[name="password"]', 'any-password');
  await Promise.all([page.waitForNavigation(), page.click('button[type="submit"]')]);
  // The consent page, unless the IdP skipped it.
  if (await page.locator('input[name="prompt"][value="consent"]').count()) {
    await Promise.all([page.waitForURL('**/api/auth/user'), page.click('button[type="submit"]')]);
  }
  await page.waitForURL('**/api/auth/user');
  const text = await page.locator('body').innerText();
  const cookies = await context.cookies();
  const cookie = cookies.find((c) => c.name === 'trellis_session') ?? null;
  console.log(JSON.stringify({ user: JSON.parse(text), cookie }));
} finally {
  await browser.close();
}
