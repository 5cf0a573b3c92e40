/**
 * A real A2A agent (the @a2a-js/sdk 1.x server with its 0.3 compatibility on, so 0.3 and 1.0 clients both
 * work) behind a recording proxy in this process: the tests see every request that reached the upstream.
 * Layout: the card at /agent/.well-known/agent-card.json, JSON-RPC at /agent, REST at /agent/rest. The cards
 * name `publicBase` (the gateway) for their interfaces, so clients come back through the gateway.
 * The executor echoes; a message reading `gated` waits after its first events until the test opens the gate.
 */
import type { Test } from 'tap'
import type { Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import express from 'express'
import { TaskState, type AgentCard } from 'a2a-sdk-v1'
import { AgentEvent, DefaultRequestHandler, InMemoryTaskStore, type AgentExecutor, type ExecutionEventBus, type RequestContext } from 'a2a-sdk-v1/server'
import { agentCardHandler, jsonRpcHandler, restHandler } from 'a2a-sdk-v1/server/express'
import { duplicateInterfacesForLegacy } from 'a2a-sdk-v1/compat/v0_3'
import { startRecordingProxy, type Reached } from './recording-proxy.js'

export type { Reached }

export interface A2aUpstream {
  /** `http://127.0.0.1:<port>`: the recording proxy's origin. */
  readonly url: string
  readonly reached: Reached[]
  /** Starts the agent; its cards name `publicBase` + `/agent` (JSON-RPC) and `/agent/rest` (REST). */
  serve(publicBase: string): Promise<void>
  /** Lets every `gated` task waiting now go on. */
  openGates(): void
}

const text = (value: string) => ({ content: { $case: 'text' as const, value }, filename: '', mediaType: 'text/plain' })

function card(publicBase: string): AgentCard {
  const interfaces = duplicateInterfacesForLegacy([
    { url: `${publicBase}/agent`, protocolBinding: 'JSONRPC', tenant: '', protocolVersion: '1.0' },
    { url: `${publicBase}/agent/rest`, protocolBinding: 'HTTP+JSON', tenant: '', protocolVersion: '1.0' },
  ], ['JSONRPC', 'HTTP+JSON'])
  return {
    name: 'echo', description: 'echoes', version: '1.0.0', supportedInterfaces: interfaces,
    capabilities: { streaming: true, pushNotifications: false, extendedAgentCard: true, extensions: [] },
    securitySchemes: { bearer: { scheme: { $case: 'httpAuthSecurityScheme', value: { scheme: 'bearer', description: '', bearerFormat: '' } } } },
    securityRequirements: [{ schemes: { bearer: { list: [] } } }],
    defaultInputModes: ['text/plain'], defaultOutputModes: ['text/plain'],
    skills: [{ id: 'echo', name: 'Echo', description: 'echoes', tags: ['echo'], examples: [], inputModes: [], outputModes: [], securityRequirements: [] }],
    signatures: [],
  } as unknown as AgentCard
}

class EchoExecutor implements AgentExecutor {
  readonly #gates: (() => void)[] = []
  /** Set at teardown: no task waits any more. */
  #closed = false

  /** Lets the tasks waiting now go on; a later `gated` task waits again. */
  openGates(): void {
    for (const open of this.#gates.splice(0)) open()
  }

  close(): void {
    this.#closed = true
    this.openGates()
  }

  async execute(context: RequestContext, bus: ExecutionEventBus): Promise<void> {
    const { taskId, contextId, userMessage, task } = context
    const part = userMessage.parts.find((p) => p.content?.$case === 'text')
    const said = part?.content?.$case === 'text' ? part.content.value : ''
    if (task === undefined) {
      bus.publish(AgentEvent.task({ id: taskId, contextId, status: { state: TaskState.TASK_STATE_SUBMITTED }, artifacts: [], history: [userMessage], metadata: {} } as never))
    }
    bus.publish(AgentEvent.statusUpdate({ taskId, contextId, status: { state: TaskState.TASK_STATE_WORKING }, metadata: {} } as never))
    if (said === 'gated' && !this.#closed) await new Promise<void>((resolve) => this.#gates.push(resolve))
    bus.publish(AgentEvent.artifactUpdate({ taskId, contextId, artifact: { artifactId: 'a1', name: '', description: '', parts: [text(`echo:${said}`)], extensions: [], metadata: {} }, append: false, lastChunk: true, metadata: {} } as never))
    bus.publish(AgentEvent.statusUpdate({ taskId, contextId, status: { state: TaskState.TASK_STATE_COMPLETED }, metadata: {} } as never))
    bus.finished()
  }

  async cancelTask(): Promise<void> {}
}

export async function startA2aUpstream(t: Test): Promise<A2aUpstream> {
  const executor = new EchoExecutor()
  let agent: Server | null = null
  let agentPort = 0
  const reached: Reached[] = []
  const url = await startRecordingProxy(t, () => ({ host: '127.0.0.1', port: agentPort }), reached)
  t.teardown(() => {
    executor.close()
    agent?.closeAllConnections()
    agent?.close()
  })
  return {
    url,
    reached,
    async serve(publicBase) {
      const publicCard = card(publicBase)
      const extended = { ...publicCard, name: 'echo-extended' } as AgentCard
      const handler = new DefaultRequestHandler(publicCard, new InMemoryTaskStore(), executor, undefined, undefined, undefined, extended)
      const userBuilder = async (req: { header(name: string): string | undefined }) => (req.header('authorization') === undefined
        ? { isAuthenticated: false, userName: '' }
        : { isAuthenticated: true, userName: 'caller' })
      const legacyCompat = { enabled: true }
      const app = express()
      app.use('/agent/.well-known/agent-card.json', agentCardHandler({ agentCardProvider: handler, legacyCompat }))
      app.use('/agent/rest', restHandler({ requestHandler: handler, userBuilder, legacyCompat } as never))
      app.use('/agent', jsonRpcHandler({ requestHandler: handler, userBuilder, legacyCompat } as never))
      const listening = app.listen(0, '127.0.0.1') as Server
      agent = listening
      await new Promise<void>((resolve) => listening.once('listening', resolve))
      agentPort = (listening.address() as AddressInfo).port
    },
    openGates: () => executor.openGates(),
  }
}
