// A real OpenID provider for the black-box tests: panva's oidc-provider (npm, installed by
// scripts/oidc-provider.sh into target/oidc-provider/node_modules) with
// - one static confidential client (client_secret_basic), PKCE required, RFC 9207 `iss`;
// - its development login form (any login, any password: the login is the account id) and
//   consent page, which the tests fill in like a browser;
// - accounts, with their e-mail and `groups`, read from a JSON file the test rewrites: the file
//   is re-read at every claims lookup, so a group change at the "IdP" needs no restart;
// - RP-initiated logout (end_session_endpoint).
//
// Usage: TRELLIS_NODE_MODULES=target/oidc-provider/node_modules \
//   node provider.mjs PORT CLIENT_ID CLIENT_SECRET REDIRECT_URI POST_LOGOUT_URI ACCOUNTS_JSON
// Prints "listening <issuer>" once it accepts connections.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

// ES modules ignore NODE_PATH: the package is imported from the test peers' node_modules.
const modules = process.env.TRELLIS_NODE_MODULES;
const { default: Provider } = await import(pathToFileURL(join(modules, 'oidc-provider', 'lib', 'index.js')).href);

const [port, clientId, clientSecret, redirectUri, postLogoutUri, accountsFile] = process.argv.slice(2);
const issuer = `http://127.0.0.1:${port}`;

function account(id) {
  const accounts = JSON.parse(readFileSync(accountsFile, 'utf8'));
  return accounts[id];
}

const provider = new Provider(issuer, {
  clients: [{
    client_id: clientId,
    client_secret: clientSecret,
    redirect_uris: [redirectUri],
    post_logout_redirect_uris: [postLogoutUri],
    grant_types: ['authorization_code'],
    response_types: ['code'],
    token_endpoint_auth_method: 'client_secret_basic',
  }],
  pkce: { required: () => true },
  claims: {
    openid: ['sub'],
    email: ['email', 'email_verified'],
    profile: ['name', 'given_name', 'groups'],
  },
  // The default (conform) ID token carries no profile claims in the code flow: Trellis reads
  // e-mail, name and groups from userinfo, the fallback path of the groups claim.
  findAccount: async (_ctx, id) => {
    if (!account(id)) return undefined;
    return {
      accountId: id,
      claims: async () => {
        const a = account(id) ?? {};
        return { sub: id, email: a.email, email_verified: true, given_name: a.givenName, name: a.givenName, groups: a.groups };
      },
    };
  },
  features: {
    devInteractions: { enabled: true },
    rpInitiatedLogout: { enabled: true },
  },
  cookies: { keys: ['trellis-test-cookie-key'] },
});
// oidc-provider logs its development-only settings; they are what a test IdP wants.
provider.on('server_error', (_ctx, err) => console.error('server_error', err));
provider.listen(Number(port), '127.0.0.1', () => console.log(`listening ${issuer}`));
