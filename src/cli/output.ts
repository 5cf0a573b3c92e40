/**
 * What the operator commands print: aligned tables and `label  value` lists for people, JSON for scripts.
 * Text that came from the registry is printed through {@link clean}, so a name or a reason holding terminal
 * escape sequences cannot rewrite the operator's screen.
 */

// C0 and C1 controls and DEL: ESC starts the terminal sequences; newlines would break the columns.
const CONTROLS = /[\u0000-\u001f\u007f-\u009f]/g

/** `value` as one line of text: controls written as `\xNN`, null and undefined as `-`. */
export function clean(value: unknown): string {
  if (value === null || value === undefined || value === '') return '-'
  const text = typeof value === 'string' ? value : typeof value === 'object' ? JSON.stringify(value) : String(value)
  return text.replace(CONTROLS, (c) => `\\x${c.charCodeAt(0).toString(16).padStart(2, '0')}`)
}

/** A multi-line text (a policy's YAML) with its line breaks and tabs kept and every other control escaped. */
export function cleanBlock(text: string): string {
  return text.replace(CONTROLS, (c) => (c === '\n' || c === '\t' ? c : `\\x${c.charCodeAt(0).toString(16).padStart(2, '0')}`))
}

export type Column<T> = readonly [header: string, cell: (row: T) => unknown]

/** Rows under upper-case headers, columns two spaces apart; the last column is not padded. */
export function table<T>(rows: readonly T[], columns: readonly Column<T>[]): string {
  const cells = [columns.map(([header]) => header.toUpperCase()), ...rows.map((row) => columns.map(([, cell]) => clean(cell(row))))]
  const widths = columns.map((_, i) => Math.max(...cells.map((line) => (line[i] as string).length)))
  return cells.map((line) => line.map((cell, i) => (i === line.length - 1 ? cell : cell.padEnd(widths[i] as number))).join('  ').trimEnd()).join('\n') + '\n'
}

/** `label  value` lines, the values in one column. */
export function fields(pairs: readonly (readonly [string, unknown])[]): string {
  const width = Math.max(...pairs.map(([label]) => label.length))
  return pairs.map(([label, value]) => `${label.padEnd(width)}  ${clean(value)}`).join('\n') + '\n'
}

export const json = (value: unknown): string => `${JSON.stringify(value, null, 2)}\n`
