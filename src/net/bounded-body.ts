// A peer decides how long its body is, so every body this service reads whole goes through
// `readBoundedBody`, which costs at most the bound whatever the peer declares or streams.

/** A response body: a Node stream (undici) or a web stream (fetch). */
export type ResponseBody = AsyncIterable<Uint8Array> & (
  | { destroy(): unknown; on(event: 'error', listener: () => void): unknown }
  | { cancel(): Promise<void> }
)

export class BodyTooLargeError extends Error {
  readonly code = 'BODY_TOO_LARGE'
  override readonly name = 'BodyTooLargeError'

  constructor(
    readonly limit: number,
    /** The length the peer declared, when that is what exceeded the bound; null when counted while reading. */
    readonly declared: number | null,
  ) {
    super(`The body exceeds ${limit} bytes${declared === null ? '' : ` (${declared} declared)`}.`)
  }
}

const ignore = (): void => {}

// The error listener comes first: destroying an unfinished Node stream emits an abort error, which
// without a listener would crash the process.
export function abandonBody(body: ResponseBody): void {
  if ('cancel' in body) {
    body.cancel().catch(ignore)
    return
  }
  body.on('error', ignore)
  body.destroy()
}

/** A declared length (Content-Length, string or number) over the bound fails before anything is read. */
export async function readBoundedBody(body: ResponseBody, maxBytes: number, declaredLength?: unknown): Promise<Buffer> {
  const declared = Number(declaredLength)
  if (declared > maxBytes) {
    abandonBody(body)
    throw new BodyTooLargeError(maxBytes, declared)
  }
  const chunks: Uint8Array[] = []
  let size = 0
  for await (const chunk of body) {
    size += chunk.byteLength
    if (size > maxBytes) {
      abandonBody(body)
      throw new BodyTooLargeError(maxBytes, null)
    }
    chunks.push(chunk)
  }
  // One chunk (the usual small answer) is used as it is, without the copy Buffer.concat makes.
  if (chunks.length === 1) {
    const only = chunks[0] as Uint8Array
    return Buffer.isBuffer(only) ? only : Buffer.from(only.buffer, only.byteOffset, only.byteLength)
  }
  return Buffer.concat(chunks, size)
}
