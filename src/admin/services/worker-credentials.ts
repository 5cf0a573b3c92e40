/**
 * The registry credentials of the appliance's gateway workers (SERVICE_GATEWAY_WORKERS above 1): one secret
 * per worker, made at start and held only in this process's memory, never in the database, so a primary
 * that dies leaves no credential anyone could use. Each acts as the appliance's own gateway reports in
 * process (an operator, so every organization's events are attributed), a member of the gateway's
 * workspace (its bundle), and has its own rate-limit budget (its key id).
 */
import { createHash, timingSafeEqual } from 'node:crypto'
import { generateApiKeySecret } from '../../core/api-key.js'
import type { Principal } from '../../core/principal.js'
import type { CredentialResolver } from '../plugins/auth.js'

const NIL_UUID = '00000000-0000-0000-0000-000000000000'

const digest = (secret: string): Buffer => createHash('sha256').update(secret).digest()

export class WorkerCredentials {
  readonly #byWorker = new Map<number, { digest: Buffer; principal: Principal }>()
  readonly #workspace: string

  /**
   * `workspace`: the gateway's SERVICE_WORKSPACE; without one the nil UUID, an organization that cannot
   * exist, so the credential's own-organization reads (the gateway's key check lists agents) find nothing.
   */
  constructor(workspace: string | null) {
    this.#workspace = workspace ?? NIL_UUID
  }

  /** A new secret for worker `index` (replacing its previous one): passed in the worker's environment only. */
  issue(index: number): string {
    const secret = generateApiKeySecret()
    this.#byWorker.set(index, {
      digest: digest(secret),
      principal: { kind: 'api_key', orgId: this.#workspace, role: 'member', operator: true, userId: null, keyId: `gateway-worker-${index}` },
    })
    return secret
  }

  /** Tried before the database's API keys: a digest comparison per worker, no query. */
  readonly resolver: CredentialResolver = async (credential) => {
    if (this.#byWorker.size === 0 || !credential.startsWith('sk_')) return null
    const presented = digest(credential)
    for (const entry of this.#byWorker.values()) if (timingSafeEqual(entry.digest, presented)) return entry.principal
    return null
  }

  /** Every secret stops working (the workers are gone). */
  forget(): void {
    this.#byWorker.clear()
  }
}
