/**
 * A minimal, deterministic ustar writer with gzip, for OPA bundles (docs/wire-contract.md §8). Written here
 * rather than taken from a tar library: the subset needed (regular files only, short names) is a few
 * dozen lines, and owning it lets every header field be fixed so that equal content gives equal bytes.
 */
import { gzipSync } from 'node:zlib'

/** One regular file of an archive. */
export interface TarEntry {
  /** Path inside the archive, `/`-separated, relative. */
  readonly name: string
  readonly content: string | Uint8Array
}

const BLOCK = 512

function writeString(header: Buffer, offset: number, length: number, value: string): void {
  const bytes = Buffer.from(value, 'utf8')
  if (bytes.length > length) throw new Error(`tar header field too long: ${value}`)
  bytes.copy(header, offset)
}

// Numeric fields are zero-padded octal followed by a NUL, filling the field.
function writeOctal(header: Buffer, offset: number, length: number, value: number): void {
  const digits = value.toString(8).padStart(length - 1, '0')
  if (digits.length > length - 1) throw new Error(`tar numeric field overflow: ${value}`)
  writeString(header, offset, length, `${digits}\0`)
}

// ustar keeps 100 bytes for the name and 155 for a directory prefix, split at a `/`.
function splitName(name: string): { prefix: string; base: string } {
  if (Buffer.byteLength(name) <= 100) return { prefix: '', base: name }
  for (let i = name.indexOf('/'); i !== -1; i = name.indexOf('/', i + 1)) {
    const prefix = name.slice(0, i)
    const base = name.slice(i + 1)
    if (Buffer.byteLength(prefix) <= 155 && Buffer.byteLength(base) <= 100 && base !== '') return { prefix, base }
  }
  throw new Error(`tar entry name too long: ${name}`)
}

function headerOf(name: string, size: number): Buffer {
  if (name === '' || name.startsWith('/') || name.split('/').includes('..')) throw new Error(`unsafe tar entry name: ${name}`)
  const header = Buffer.alloc(BLOCK)
  const { prefix, base } = splitName(name)
  writeString(header, 0, 100, base)
  writeOctal(header, 100, 8, 0o644) // mode
  writeOctal(header, 108, 8, 0) // uid
  writeOctal(header, 116, 8, 0) // gid
  writeOctal(header, 124, 12, size)
  writeOctal(header, 136, 12, 0) // mtime: fixed so the bytes depend on content only
  header.fill(0x20, 148, 156) // checksum is computed with its own field as spaces
  header[156] = 0x30 // typeflag '0': regular file
  writeString(header, 257, 6, 'ustar\0')
  writeString(header, 263, 2, '00')
  writeString(header, 345, 155, prefix)
  let sum = 0
  for (const byte of header) sum += byte
  writeString(header, 148, 8, `${sum.toString(8).padStart(6, '0')}\0 `)
  return header
}

/** The uncompressed ustar archive of `entries`, sorted by name (code-point order) for stable output. */
export function tarArchive(entries: readonly TarEntry[]): Buffer {
  const sorted = [...entries].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))
  const names = new Set<string>()
  const parts: Buffer[] = []
  for (const entry of sorted) {
    if (names.has(entry.name)) throw new Error(`duplicate tar entry: ${entry.name}`)
    names.add(entry.name)
    const body = typeof entry.content === 'string' ? Buffer.from(entry.content, 'utf8') : Buffer.from(entry.content)
    parts.push(headerOf(entry.name, body.length), body)
    const pad = (BLOCK - (body.length % BLOCK)) % BLOCK
    if (pad > 0) parts.push(Buffer.alloc(pad))
  }
  parts.push(Buffer.alloc(2 * BLOCK)) // end-of-archive marker
  return Buffer.concat(parts)
}

/**
 * A gzip'd ustar archive. Node's gzip header carries mtime 0 and a fixed OS byte, and the level is
 * pinned, so the same entries always give the same bytes.
 */
export function tarGz(entries: readonly TarEntry[]): Buffer {
  return gzipSync(tarArchive(entries), { level: 9 })
}
