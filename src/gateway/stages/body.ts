/**
 * The one bounded reader of request bodies the gateway decides on (MCP and A2A routes): the whole body, at
 * most SERVICE_MCP_MAX_BODY_BYTES, refused from its Content-Length or as soon as it grows past the limit.
 */
import type { GatewayErrorCode } from '../../core/gateway-errors.js'
import type { GatewayContext } from '../context.js'
import { ANSWERED, RESUMES, type Step } from '../pipeline.js'
import type { RequestScope } from '../request-scope.js'
import { CLIENT_CLOSED_STATUS } from '../upstream/upstream.js'
import { fail, refuse } from './refuse.js'

/** Refuses before the body is read: the connection closes after the answer rather than carry an unread body. */
export function refuseUnread(ctx: GatewayContext, scope: RequestScope, code: GatewayErrorCode): typeof ANSWERED {
  scope.res.shouldKeepAlive = false
  refuse(ctx, scope, code)
  scope.req.resume()
  return ANSWERED
}

/** Calls `read` with the body once it is whole; `tooLarge` is the refusal of a body over the limit. */
export function readWholeBody(ctx: GatewayContext, scope: RequestScope, tooLarge: GatewayErrorCode, read: (body: Buffer) => void): Step {
  const req = scope.req
  const maxBytes = ctx.config.mcpMaxBodyBytes
  // The framing stage admitted only a single decimal Content-Length.
  const declared = req.headers['content-length']
  if (declared !== undefined && Number(declared) > maxBytes) return refuseUnread(ctx, scope, tooLarge)

  const chunks: Buffer[] = []
  let size = 0
  let done = false
  const onData = (chunk: Buffer): void => {
    if (done) return
    size += chunk.length
    if (size > maxBytes) {
      done = true
      refuseUnread(ctx, scope, tooLarge)
      return
    }
    chunks.push(chunk)
  }
  const onEnd = (): void => {
    if (done) return
    done = true
    try {
      read(chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, size))
    } catch (error) {
      fail(ctx, scope, error)
    }
  }
  // A client that leaves mid-body gets no answer; the log line says 499 as for any request it abandons.
  const onClose = (): void => {
    if (done) return
    done = true
    scope.status = CLIENT_CLOSED_STATUS
    ctx.telemetry.finish(scope)
  }
  req.on('data', onData)
  req.on('end', onEnd)
  req.on('close', onClose)
  return RESUMES
}
