/**
 * The operator console's session cookie as both planes read it (docs/console.md, "The cookie never leaves"):
 * the admin plane takes it as a credential, the gateway removes it from every request it forwards and from
 * every answer an upstream sends back, so that one definition of "the console cookie" serves both.
 */

/** The name of the console's HttpOnly session cookie; the console sets no other cookie. */
export const CONSOLE_COOKIE = 'agent_trust_console'

/**
 * Whether one `;`-separated part of a `Cookie` header is a console cookie pair: a name that is exactly
 * {@link CONSOLE_COOKIE} once trimmed, then `=`. The admin plane's reader and the gateway's removal share
 * this rule, so nothing the admin plane would accept as the credential can pass the gateway.
 */
export function isConsoleCookiePair(part: string): boolean {
  const eq = part.indexOf('=')
  return eq >= CONSOLE_COOKIE.length && part.slice(0, eq).trim() === CONSOLE_COOKIE
}

/**
 * A `Cookie` header value without its console cookie pairs, the other pairs and the separators between
 * them byte for byte as sent; null when nothing but separators is left (the header is then dropped).
 * Callers check `value.includes(CONSOLE_COOKIE)` first, so a header without it costs one scan.
 */
export function withoutConsoleCookie(value: string): string | null {
  let kept = ''
  let any = false
  let removedFirst = false
  let start = 0
  for (;;) {
    const semicolon = value.indexOf(';', start)
    const end = semicolon < 0 ? value.length : semicolon
    const part = value.slice(start, end)
    if (isConsoleCookiePair(part)) {
      if (!any) removedFirst = true
    } else if (any) {
      kept += `;${part}`
    } else {
      // The first pair kept after a removed one loses the space that separated it from the removed one.
      kept = removedFirst ? trimLeadingBlanks(part) : part
      any = true
    }
    if (semicolon < 0) break
    start = semicolon + 1
  }
  return /[^; \t]/.test(kept) ? kept : null
}

/** Whether a `Set-Cookie` value sets a console cookie: its name, before the first `=`, trimmed. */
export function setsConsoleCookie(value: string): boolean {
  const semicolon = value.indexOf(';')
  return isConsoleCookiePair(semicolon < 0 ? value : value.slice(0, semicolon))
}

function trimLeadingBlanks(text: string): string {
  let i = 0
  while (i < text.length && (text[i] === ' ' || text[i] === '\t')) i++
  return i === 0 ? text : text.slice(i)
}
