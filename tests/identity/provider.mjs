// A real OpenID Connect provider for the tests: the npm `oidc-provider` package (certified), run as a
// process. Its built-in development sign-in pages accept any login name; the claims of each name (e-mail,
// groups) come from a JSON file the tests edit between sign-ins, as a directory would change.
//
//   node tests/identity/provider.mjs <config.json>
//   config: {"port": 0, "issuer": "http://127.0.0.1:<port>", "client": {...}, "usersFile": "users.json"}
import { readFileSync } from 'node:fs';

import Provider from 'oidc-provider';

const config = JSON.parse(readFileSync(process.argv[2], 'utf8'));

function users() {
  return JSON.parse(readFileSync(config.usersFile, 'utf8'));
}

const provider = new Provider(config.issuer, {
  clients: [config.client],
  cookies: { keys: ['gpuportal-test-cookie-key'] },
  claims: {
    openid: ['sub'],
    email: ['email', 'email_verified'],
    profile: ['preferred_username', 'name', 'groups'],
  },
  features: {
    devInteractions: { enabled: true },
    rpInitiatedLogout: { enabled: true },
  },
  pkce: { required: () => true },
  async findAccount(ctx, sub) {
    const person = users()[sub];
    if (!person) return undefined;
    return {
      accountId: sub,
      async claims() {
        return { sub, email_verified: true, preferred_username: sub, ...person };
      },
    };
  },
});
provider.proxy = false;

const server = provider.listen(config.port, '127.0.0.1', () => {
  console.log(`listening ${server.address().port}`);
});
