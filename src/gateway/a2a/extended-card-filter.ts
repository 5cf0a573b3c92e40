/**
 * The extended card on its way back to its caller (docs/a2a.md, "Extended cards"): read whole and strict,
 * its interface URLs moved to the gateway and signed as the public card is, so a client that switches to
 * the extended card is still sent through the gateway. An answer that cannot be read is cut off rather
 * than passed through: the client must not be handed the agent's own addresses.
 */
import { Transform, type TransformCallback } from 'node:stream'
import type { A2aBinding } from '../../core/a2a-methods.js'
import { isRecord } from '../../core/json-objects.js'
import { parseStrictJson } from '../../core/strict-json.js'
import type { ResponseFilter } from '../upstream/upstream.js'

export class ExtendedCardFilter implements ResponseFilter {
  constructor(
    private readonly serve: (card: Record<string, unknown>) => Promise<Record<string, unknown>>,
    private readonly binding: A2aBinding,
    private readonly maxBytes: number,
  ) {}

  filterFor(status: number): Transform | null {
    // An error answer names no interfaces; the card itself is JSON whatever type the agent declared.
    if (status !== 200) return null
    return new ExtendedCardTransform(this.serve, this.binding === 'jsonrpc', this.maxBytes)
  }
}

class ExtendedCardTransform extends Transform {
  readonly #chunks: Buffer[] = []
  #size = 0

  constructor(
    private readonly serve: (card: Record<string, unknown>) => Promise<Record<string, unknown>>,
    /** The card is a JSON-RPC answer's `result` (else the whole body, REST). */
    private readonly inResult: boolean,
    private readonly maxBytes: number,
  ) {
    super()
  }

  override _transform(chunk: Buffer, _encoding: BufferEncoding, callback: TransformCallback): void {
    this.#size += chunk.length
    if (this.#size > this.maxBytes) return callback(new Error(`the extended card is larger than ${this.maxBytes} bytes`))
    this.#chunks.push(chunk)
    callback()
  }

  override _flush(callback: TransformCallback): void {
    let answer: unknown
    try {
      answer = parseStrictJson(Buffer.concat(this.#chunks, this.#size))
    } catch (error) {
      return callback(error as Error)
    }
    if (!isRecord(answer)) return callback(new Error('the extended card answer is not a JSON object'))
    // A JSON-RPC error answer carries no card and goes on as it came.
    if (this.inResult && !isRecord(answer.result)) return callback(null, Buffer.concat(this.#chunks, this.#size))
    const card = this.inResult ? answer.result as Record<string, unknown> : answer
    this.serve(card).then(
      (served) => callback(null, Buffer.from(JSON.stringify(this.inResult ? { ...answer, result: served } : served))),
      (error: unknown) => callback(error instanceof Error ? error : new Error(String(error))),
    )
  }
}
