/**
 * The appliance's own commands of `agent-trust` (serve, gateway, migrate, check-config, bootstrap, keys,
 * breakglass); src/cli/index.ts answers --help and --version before this module loads.
 */
import { ConfigError, CONFIG_SCHEMA, configurationTable, describeUnknownVariable, loadConfig, unknownVariables, type Config } from '../config/index.js'
import { bootstrap, bootstrapKeyFile, createOperatorKey } from '../admin/services/credentials.js'
import { installSignalHandlers, openMigratedDatabase, openReachableDatabase, startAppliance, startGatewayCommand, StartupError } from '../main.js'
import { generateBreakglassKeyPair, issueBreakglassToken } from './breakglass.js'
import { flag, option, rejectLeftovers, UsageError } from './args.js'
import { migrate } from '../db/migrate.js'
import { openDatabase, type Database } from '../db/database.js'
import { recordCliAct, runAuditVerify } from './audit.js'
import { KeyRingError, loadOrCreateKeyFile, retireKey, rotateKeyFile } from '../authority/key-ring.js'
import { countUnexpiredBadgesByKid } from '../db/repositories/badges.js'
import { createLogger, describeError } from '../telemetry/logger.js'
import { helpFor, PROGRAM, TOP_USAGE } from './usage.js'

async function withDatabase<T>(config: Config, work: (db: Awaited<ReturnType<typeof openMigratedDatabase>>) => Promise<T>): Promise<T> {
  const db = await openMigratedDatabase(config)
  try {
    return await work(db)
  } finally {
    await db.close()
  }
}

async function run(command: string, args: string[]): Promise<number> {
  if (command === 'check-config') {
    if (flag(args, '--table')) {
      process.stdout.write(`${configurationTable()}\n`)
      return 0
    }
    if (flag(args, '--schema')) {
      process.stdout.write(`${JSON.stringify(CONFIG_SCHEMA, null, 2)}\n`)
      return 0
    }
    rejectLeftovers(args)
    // Warnings first and whatever else is wrong: an unknown name is often the cause of a missing value.
    for (const unknown of unknownVariables(process.env)) process.stderr.write(`warning: ${describeUnknownVariable(unknown)}\n`)
    const config = loadConfig()
    process.stdout.write(`configuration is valid (environment ${config.environment}, database ${config.database.kind})\n`)
    return 0
  }

  if (command === 'breakglass') {
    const sub = args.shift()
    if (sub === 'keygen') {
      const privateFile = option(args, '--private')
      const publicFile = option(args, '--public')
      if (privateFile === undefined || publicFile === undefined) throw new UsageError('breakglass keygen needs --private FILE and --public FILE')
      rejectLeftovers(args)
      await generateBreakglassKeyPair(privateFile, publicFile)
      process.stdout.write(`private key written to ${privateFile} (mode 0600); set SERVICE_BREAKGLASS_PUBLIC_KEY=${publicFile}\n`)
      return 0
    }
    if (sub !== 'issue') throw new UsageError('breakglass: expected "issue" or "keygen"')
    const keyFile = option(args, '--key')
    const subject = option(args, '--sub')
    const reason = option(args, '--reason')
    if (keyFile === undefined || subject === undefined || reason === undefined) {
      throw new UsageError('breakglass issue needs --key FILE, --sub OPERATOR and --reason TEXT')
    }
    const ttl = option(args, '--ttl')
    const list = (value: string | undefined): string[] => (value ?? '*').split(',').map((v) => v.trim()).filter((v) => v !== '')
    const methods = list(option(args, '--methods'))
    const routes = list(option(args, '--routes'))
    const issuer = option(args, '--iss') ?? 'service-cli'
    rejectLeftovers(args)
    const ttlSeconds = ttl === undefined ? 900 : Number(ttl)
    if (!Number.isSafeInteger(ttlSeconds) || ttlSeconds < 1 || ttlSeconds > 3600) throw new UsageError('--ttl must be 1-3600 seconds')
    const token = await issueBreakglassToken({ keyFile, subject, reason, ttlSeconds, methods, routes, issuer })
    process.stdout.write(`${token}\n`)
    return 0
  }

  if (command === 'audit') {
    const sub = args.shift()
    if (sub !== 'verify') throw new UsageError('audit: expected "verify"')
    const file = option(args, '--file')
    const databaseUrl = option(args, '--database-url')
    const jwks = option(args, '--jwks')
    const requireSignedHead = flag(args, '--require-signed-head')
    rejectLeftovers(args)
    if (file !== undefined && databaseUrl !== undefined) throw new UsageError('audit verify: give --file or --database-url, not both')
    const open = async (): Promise<Database> => {
      if (databaseUrl !== undefined) {
        const db = await openDatabase({ kind: 'postgres', url: databaseUrl, poolSize: 2 })
        await db.ping()
        return db
      }
      return openReachableDatabase(loadConfig())
    }
    return runAuditVerify({ ...(file === undefined ? {} : { file }), ...(jwks === undefined ? {} : { jwks }), requireSignedHead }, open, (text) => process.stdout.write(text))
  }

  const config = loadConfig()
  switch (command) {
    case 'gateway':
    case 'serve': {
      rejectLeftovers(args)
      const logger = createLogger(config.logLevel)
      const running = command === 'gateway' ? await startGatewayCommand(config, { logger }) : await startAppliance(config, { logger })
      installSignalHandlers(running, logger, { stopWithParent: config.stopWithParent })
      return -1 // keep running
    }
    case 'migrate': {
      rejectLeftovers(args)
      const db = await openReachableDatabase(config)
      try {
        const applied = await migrate(db)
        process.stdout.write(applied.length === 0 ? 'database is up to date\n' : `applied migrations ${applied.join(', ')}\n`)
      } finally {
        await db.close()
      }
      return 0
    }
    case 'bootstrap': {
      rejectLeftovers(args)
      const outcome = await withDatabase(config, (db) => bootstrap(db, { configuredKey: config.bootstrapApiKey, keyFile: bootstrapKeyFile(config.dataDir, config.database) }))
      if (outcome.kind === 'generated-key') {
        process.stdout.write(`operator API key (shown once): ${outcome.key}\nalso stored in ${outcome.file}\n`)
      } else if (outcome.kind === 'configured-key') {
        process.stdout.write(`bootstrap key ${outcome.created ? 'created' : 'already present'}\n`)
      } else {
        process.stdout.write('an organization already exists; nothing to do\n')
      }
      return 0
    }
    case 'keys': {
      const sub = args.shift()
      if (sub === 'rotate') {
        rejectLeftovers(args)
        await loadOrCreateKeyFile(config.caKeyPath)
        const { kid, previous } = await rotateKeyFile(config.caKeyPath)
        process.stdout.write(`new signing key ${kid}; ${previous} stays in the JWKS until retired\n`)
        if (config.audit.enabled) await withDatabase(config, (db) => recordCliAct(db, 'authority_key.rotate', kid, { kid, previous }))
        return 0
      }
      if (sub === 'retire') {
        const force = flag(args, '--force')
        const kid = args.shift()
        if (kid === undefined) throw new UsageError('keys retire: which kid?')
        rejectLeftovers(args)
        await withDatabase(config, async (db) => {
          await retireKey(config.caKeyPath, kid, { force, unexpiredBadges: (k) => countUnexpiredBadgesByKid(db, k) })
          if (config.audit.enabled) await recordCliAct(db, 'authority_key.retire', kid, { kid, force })
        })
        process.stdout.write(`retired ${kid}\n`)
        return 0
      }
      if (sub !== 'create') throw new UsageError('keys: expected "create", "rotate" or "retire"')
      if (!flag(args, '--operator')) throw new UsageError('keys create: only --operator keys are made here; use POST /v1/keys for org keys')
      const name = option(args, '--name') ?? 'operator key'
      rejectLeftovers(args)
      const key = await withDatabase(config, (db) => createOperatorKey(db, name))
      process.stdout.write(`operator API key "${key.name}" (shown once): ${key.key}\n`)
      return 0
    }
    default:
      throw new UsageError(`unknown command: ${command}`)
  }
}

/**
 * Runs `agent-trust <command> …` for the appliance's commands; the exit code, or -1 for a server that
 * keeps running. Failures are reported on stderr in one line (a usage error with the command's usage).
 */
export async function runServiceCommand(argv: string[]): Promise<number> {
  const args = [...argv]
  const command = args.shift() ?? 'serve'
  try {
    return await run(command, args)
  } catch (error) {
    if (error instanceof ConfigError) {
      process.stderr.write(`${error.message}\n`)
      return 2
    }
    if (error instanceof UsageError) {
      const usage = helpFor(`${command} ${argv[1] ?? ''}`.trim()) ?? helpFor(command) ?? TOP_USAGE
      process.stderr.write(`${error.message}\n\n${usage}`)
      return 2
    }
    if (error instanceof KeyRingError || error instanceof StartupError) {
      process.stderr.write(`${PROGRAM}: ${error.message}\n`)
      return 1
    }
    const { type, message } = describeError(error)
    process.stderr.write(`${PROGRAM}: ${String(type)}: ${String(message)}\n`)
    return 1
  }
}
