// Holding one nextTick queue entry keeps its hidden-class chain alive, so an idle-time major GC cannot
// leave `nextTick` megamorphic for good: docs/performance.md, "The held nextTick entry".
import { createHook } from 'node:async_hooks'

let retained: object | null = null

function noop(): void {}

/** Idempotent; true once an entry is held (false only if Node stops reporting TickObject resources). */
export function retainTickObjectShape(): boolean {
  if (retained !== null) return true
  const hook = createHook({
    init(_asyncId, type, _triggerAsyncId, resource) {
      if (type === 'TickObject' && retained === null) retained = resource
    },
  })
  // On for one synchronous call only: no request ever runs with async hooks on.
  hook.enable()
  try {
    process.nextTick(noop)
  } finally {
    hook.disable()
  }
  return retained !== null
}
