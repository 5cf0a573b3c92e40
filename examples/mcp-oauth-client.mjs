// An unattended MCP client of the README walkthrough (step 8), built only on the official MCP SDK: given
// the gateway's MCP URL and the agent's Ed25519 key, it meets the gateway's 401, finds the authority
// through the protected-resource metadata, gets a badge at the token endpoint (client_credentials with
// private_key_jwt) and calls two tools. Nothing of this project is imported.
//
//   CLIENT_ID=<the agent's DID> [KEY_FILE=data/bot.jwk] [MCP_URL=…] [ISSUER=…] node examples/mcp-oauth-client.mjs
import { readFileSync } from 'node:fs'
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import { PrivateKeyJwtProvider } from '@modelcontextprotocol/sdk/client/auth-extensions.js'

const { CLIENT_ID, KEY_FILE = 'data/bot.jwk', MCP_URL = 'http://localhost:8000/mcp', ISSUER = 'http://localhost:8080' } = process.env
if (CLIENT_ID === undefined) throw new Error('set CLIENT_ID to the agent\'s DID')

const authProvider = new PrivateKeyJwtProvider({
  clientId: CLIENT_ID,
  privateKey: JSON.parse(readFileSync(KEY_FILE, 'utf8')),
  algorithm: 'EdDSA',
  // Assertions go only to this authority, whatever a resource server names.
  expectedIssuer: ISSUER,
})
const client = new Client({ name: 'night-bot', version: '1.0.0' })
await client.connect(new StreamableHTTPClientTransport(new URL(MCP_URL), { authProvider }))
const found = await client.callTool({ name: 'search', arguments: { query: 'payments' } })
console.log(found.content[0].text.split('\n')[0])
await client.callTool({ name: 'pay', arguments: { amount: 5, to: 'bob' } })
  .then((paid) => console.log(paid.content[0].text), (error) => console.log(error.message))
await client.close()
