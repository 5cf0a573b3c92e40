/**
 * Capability classes, as policies and delegation envelopes name them: dot-separated segments, each a
 * lower-case letter followed by lower-case letters, digits or underscores (`files.read`).
 */
const CAPABILITY_CLASS = /^[a-z][a-z0-9_]*(?:\.[a-z][a-z0-9_]*)*$/

export function isCapabilityClass(value: string): boolean {
  return CAPABILITY_CLASS.test(value)
}
