#!/usr/bin/env node
/**
 * The `portcullis` command.
 */
import { parseArgs } from 'node:util'
import pino from 'pino'
import { ConfigError, defaultConfig, loadConfig, type Config } from './config'
import { startGateway } from './gateway'

const HELP = `Usage: portcullis <command> [options]

A policy gateway for the Docker Engine API.

Commands:
  serve [--config FILE]     Run the gateway. Without a config file (or PORTCULLIS_CONFIG)
                            it serves on built-in defaults: unix socket ./portcullis.sock
                            and 127.0.0.1:2375, upstream unix:///var/run/docker.sock,
                            policies from ./policies.
  config check FILE         Validate a config file; lists every problem, exits 1 if any.
  help, --help              Show this help.
  --version                 Print the version.

Signals (serve): SIGTERM/SIGINT drain in-flight requests and close long streams;
SIGHUP reloads the config file (log level, TLS certificates).
`

function version (): string {
  // dist/src/cli.js -> package.json two levels up
  return (require('../../package.json') as { version: string }).version
}

function configFrom (file: string | undefined): Config {
  return file ? loadConfig(file) : defaultConfig()
}

function reportConfigError (err: unknown): number {
  if (err instanceof ConfigError) {
    process.stderr.write(`portcullis: ${err.message}\n`)
    return 2
  }
  throw err
}

async function serve (args: string[]): Promise<number> {
  let values: { config?: string }
  try {
    values = parseArgs({ args, options: { config: { type: 'string', short: 'c' } }, allowPositionals: false }).values
  } catch (err) {
    process.stderr.write(`portcullis serve: ${(err as Error).message}\n\n${HELP}`)
    return 2
  }
  const file = values.config ?? process.env.PORTCULLIS_CONFIG
  let config: Config
  try {
    config = configFrom(file)
  } catch (err) {
    return reportConfigError(err)
  }
  const log = pino({ level: config.log.level, base: { service: 'portcullis' } })
  const gateway = await startGateway(config, log).catch((err: Error) => {
    log.fatal({ err: { message: err.message } }, 'cannot start')
    return null
  })
  if (!gateway) return 1
  process.on('SIGHUP', () => {
    if (!file) { log.info('SIGHUP: no config file to reload'); return }
    try {
      gateway.reload(loadConfig(file))
    } catch (err) {
      if (err instanceof ConfigError) log.error({ problems: err.problems }, 'SIGHUP: new configuration is invalid; keeping the running one')
      else log.error({ err: { message: (err as Error).message } }, 'SIGHUP: reload failed')
    }
  })
  return await new Promise<number>((resolve) => {
    const stop = (signal: string): void => {
      log.info({ signal }, 'signal received')
      gateway.close().then(() => resolve(0), () => resolve(1))
    }
    process.once('SIGTERM', stop)
    process.once('SIGINT', stop)
  })
}

function configCheck (args: string[]): number {
  const file = args[0]
  if (!file || args.length > 1) {
    process.stderr.write('usage: portcullis config check FILE\n')
    return 2
  }
  try {
    loadConfig(file)
  } catch (err) {
    if (err instanceof ConfigError) {
      process.stdout.write(`${file}: ${err.problems.length} problem${err.problems.length === 1 ? '' : 's'}\n${err.problems.map((p) => `  - ${p}`).join('\n')}\n`)
      return 1
    }
    throw err
  }
  process.stdout.write(`${file}: OK\n`)
  return 0
}

export async function main (argv: string[]): Promise<number> {
  const [command, ...rest] = argv
  switch (command) {
    case 'serve':
      return await serve(rest)
    case 'config':
      if (rest[0] === 'check') return configCheck(rest.slice(1))
      process.stderr.write('usage: portcullis config check FILE\n')
      return 2
    case undefined:
    case 'help':
    case '--help':
    case '-h':
      process.stdout.write(HELP)
      return 0
    case '--version':
    case 'version':
      process.stdout.write(version() + '\n')
      return 0
    default:
      process.stderr.write(`portcullis: unknown command ${JSON.stringify(command)}\n\n${HELP}`)
      return 2
  }
}

if (require.main === module) {
  main(process.argv.slice(2)).then((code) => { process.exitCode = code }, (err: Error) => {
    process.stderr.write(`portcullis: ${err.stack ?? err.message}\n`)
    process.exitCode = 1
  })
}
