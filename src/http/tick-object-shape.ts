/**
 * Keeps the hidden-class chain of Node's nextTick queue entries alive for the life of the process.
 *
 * Why: Node 20 builds every queue entry of `process.nextTick` as an object literal with computed keys
 * (`{ [async_id_symbol]: …, [trigger_async_id_symbol]: …, callback, args }`), so V8 reaches its final
 * hidden class through a chain of transitions that only weak references point to: the transition
 * tree, and the inline caches of `nextTick`. When a major GC runs while no entry is queued (an idle
 * gateway between bursts: the memory reducer collects exactly then), the whole chain dies, the next
 * entry gets fresh hidden classes, and the inline caches of the literal go megamorphic for good. From
 * then on every entry is built by a runtime call, which costs the gateway several µs of CPU per
 * request (docs/performance.md, "Hot-path choices"). Holding
 * one entry keeps its hidden class, and with it the chain (each class points back at its parent),
 * alive, so the transitions and the caches stay valid.
 *
 * The entry is caught with an init hook enabled for one synchronous `nextTick` call at start-up; the
 * hook is disabled at once, so no request ever runs with async hooks on.
 */
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
  hook.enable()
  try {
    process.nextTick(noop)
  } finally {
    hook.disable()
  }
  return retained !== null
}
