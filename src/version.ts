import { readFileSync } from 'node:fs'
import { projectPath } from './core/paths.js'

/** The version in package.json: what `agent-trust --version` prints and the API description states. */
export const VERSION: string = (JSON.parse(readFileSync(projectPath('package.json'), 'utf8')) as { version: string }).version
