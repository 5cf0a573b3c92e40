import { execFileSync } from 'node:child_process'
import { mkdtempSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { gunzipSync } from 'node:zlib'
import t from 'tap'
import { tarArchive, tarGz, type TarEntry } from '../../../src/core/tar.js'

function toFile(bytes: Buffer): string {
  const dir = mkdtempSync(path.join(tmpdir(), 'tar-test-'))
  const file = path.join(dir, 'archive.tar.gz')
  writeFileSync(file, bytes)
  return file
}

// GNU tar and bsdtar both read ustar; the system binary is the independent check that the bytes open.
function list(file: string): string[] {
  return execFileSync('tar', ['-tzf', file], { encoding: 'utf8' }).split('\n').filter((line) => line !== '')
}

function extract(file: string, name: string): Buffer {
  return execFileSync('tar', ['-xzf', file, '-O', name])
}

const LONG_DIR = `${'d'.repeat(60)}/${'e'.repeat(60)}`
const entries: TarEntry[] = [
  { name: 'service/policy.rego', content: 'package service.policy\n\ndefault allow := false\n' },
  { name: '.manifest', content: '{"revision":"abc","roots":["service"]}' },
  { name: 'data.json', content: '{"ünïcödé":"✓"}' },
  { name: 'empty.txt', content: '' },
  { name: 'block.bin', content: new Uint8Array(512).fill(7) },
  { name: `${LONG_DIR}/${'f'.repeat(90)}.txt`, content: 'long name' },
]

t.test('the archive opens with the system tar and lists every entry, sorted', async (t) => {
  const file = toFile(tarGz(entries))
  const names = list(file)
  t.same(names, [...entries.map((e) => e.name)].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0)), 'sorted by name, long name rebuilt from prefix')
  for (const entry of entries) {
    const expected = typeof entry.content === 'string' ? Buffer.from(entry.content, 'utf8') : Buffer.from(entry.content)
    t.ok(extract(file, entry.name).equals(expected), `${entry.name}: content round-trips`)
  }
})

t.test('headers are fixed: mode 0644, uid/gid 0, mtime 0, regular files', async (t) => {
  const file = toFile(tarGz(entries))
  const verbose = execFileSync('tar', ['-tvzf', file, '--numeric-owner'], { encoding: 'utf8' }).split('\n').filter((l) => l !== '')
  t.equal(verbose.length, entries.length)
  for (const line of verbose) {
    t.match(line, /^-rw-r--r-- 0\/0 /, `mode and owner: ${line.slice(0, 40)}`)
    t.match(line, /1970-01-01/, 'mtime is the epoch')
  }
  // raw header check: ustar magic and a checksum that matches the header bytes
  const raw = tarArchive(entries)
  t.equal(raw.length % 512, 0, 'whole blocks')
  t.ok(raw.subarray(raw.length - 1024).every((b) => b === 0), 'two zero blocks at the end')
  const header = raw.subarray(0, 512)
  t.equal(header.subarray(257, 263).toString('latin1'), 'ustar\0')
  const stored = parseInt(header.subarray(148, 154).toString('latin1'), 8)
  const copy = Buffer.from(header)
  copy.fill(0x20, 148, 156)
  t.equal(stored, copy.reduce((sum, b) => sum + b, 0), 'checksum')
})

t.test('deterministic: same entries, in any order, give identical bytes', async (t) => {
  const a = tarGz(entries)
  const b = tarGz([...entries].reverse())
  t.ok(a.equals(b), 'byte-identical')
  t.ok(gunzipSync(a).equals(tarArchive(entries)), 'gzip of the plain archive')
  t.notOk(tarGz([...entries.slice(1), { name: 'service/policy.rego', content: 'changed' }]).equals(a), 'content changes the bytes')
})

t.test('refuses what it cannot write faithfully', async (t) => {
  t.throws(() => tarArchive([{ name: 'a', content: '' }, { name: 'a', content: 'x' }]), /duplicate/)
  t.throws(() => tarArchive([{ name: '/etc/passwd', content: '' }]), /unsafe/)
  t.throws(() => tarArchive([{ name: '../up', content: '' }]), /unsafe/)
  t.throws(() => tarArchive([{ name: 'x'.repeat(101), content: '' }]), /too long/)
})
