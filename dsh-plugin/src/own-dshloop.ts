/**
 * The profile's own dshloop: with no DSHLOOP_URL, DSH runs dshloop itself. The plugin starts
 * `dshloop serve` (the API and its scheduler) on a free loopback port, its SQLite database and
 * secret key in a private directory of the profile (`<profile>/dshloop`, 0700), waits until it
 * answers, restarts it with a backoff when it dies, and stops it with DSH.
 *
 * The token is made here, in DSH's memory, and handed to dshloop on a pipe (descriptor 3), which
 * `serve --plugin-token-fd 3` reads and keeps only the hash of: never a file, an environment or a
 * command line, all of which an agent's bash can read. dshloop stops by itself when DSH is gone,
 * even by kill -9 (`--exit-with-stdin`: its stdin is a pipe from here), and one profile never runs
 * two schedulers (`--lock-file`: a second DSH on the profile finds it held and starts none).
 */

import { type ChildProcess, spawn } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { chmodSync, closeSync, mkdirSync, openSync, readSync, statSync } from 'node:fs'
import { createServer } from 'node:net'
import { join } from 'node:path'

/** Delays before restarting a dshloop that died: a crash is retried at once, a crash loop slowly. */
export const RESTART_BACKOFF_MS: readonly number[] = [1_000, 2_000, 5_000, 10_000, 30_000]
/** A dshloop that ran this long was healthy: its next death starts the backoff over. */
const HEALTHY_AFTER_MS = 60_000
/** `serve --lock-file` finds the lock held: another DSH of this profile runs its dshloop. */
export const LOCK_HELD_EXIT = 75
const LOCK_HELD_QUICK_TRIES = 3
const LOCK_HELD_RETRY_MS = 30_000
/** The first start migrates a new database (a few seconds); a slow machine gets room. */
const READY_TIMEOUT_MS = 120_000
const POLL_MS = 200
const STOP_TIMEOUT_MS = 15_000

/** Variables of DSH's environment that would point the profile's dshloop elsewhere than its own data. */
const NOT_INHERITED = ['DATABASE_URL', 'DJANGO_SECRET_KEY', 'DJANGO_SETTINGS_MODULE', 'DSHLOOP_TOKEN', 'DSHLOOP_TOKEN_FD', 'DSHLOOP_URL', 'DSHLOOP_VAR_DIR']

/** A fresh plugin token: the shape of dshloop's own (tokens.services), 256 random bits. */
export function makeToken(): string {
  return 'dsh_' + randomBytes(32).toString('base64url')
}

export interface Logger {
  info(message: string): void
  warn(message: string): void
}

export interface OwnDshloopOptions {
  /** `dshloop`, found on DSH's PATH, or a path to it. */
  readonly command: string
  /** The profile's dshloop directory: made 0700, holding dshloop's database, key, lock and log. */
  readonly dataDir: string
  /** DSH's own URL once it listens (dshloop delivers there), else undefined. */
  readonly dshUrl: () => string | undefined
  readonly token: string
  /** A fixed port (DSHLOOP_PORT) for a panel URL that stays put; 0 or absent: a free one each start. */
  readonly port?: number
  readonly logger: Logger
  /** Where dshloop answers, each time it (re)starts on a port. */
  readonly onUrl: (url: string) => void
  readonly env?: NodeJS.ProcessEnv
}

/**
 * One line for DSH's log, with the fix, from how a start failed: the spawn's error or the end of
 * what dshloop printed. Pure, for the unit tests.
 */
export function startFailure(command: string, spawnError: string | undefined, output: string, exit: string, logPath: string, fixedPort = 0): string {
  const fix = 'DSH Web keeps working, without loops, meanwhile.'
  if (spawnError === 'ENOENT') {
    return `dshloop: cannot start this profile's dshloop: no ${JSON.stringify(command)} command on DSH's PATH. ` +
      'Install it (pip install dshloop, Python 3.11 or newer) or set DSHLOOP_COMMAND to its path, or set ' +
      `DSHLOOP_URL to a dshloop you run; then restart DSH. ${fix}`
  }
  if (spawnError !== undefined) return `dshloop: cannot start this profile's dshloop (${command}: ${spawnError}). ${fix}`
  const lines = output.split('\n').map(line => line.trim()).filter(line => line !== '')
  const last = lines.at(-1) ?? `no output, ${exit}`
  if (/SyntaxError|requires[- ]python|Python 3\.(?:[0-9]|10)\b/i.test(output)) {
    return `dshloop: this profile's dshloop needs Python 3.11 or newer (${command} said: ${last}). Reinstall ` +
      `dshloop with a newer Python, or set DSHLOOP_COMMAND to one that has it. ${fix}`
  }
  if (/address already in use|Errno 98/i.test(output)) {
    if (fixedPort) return `dshloop: port ${fixedPort} (DSHLOOP_PORT) is taken: free it, or set DSHLOOP_PORT to another port or unset it and restart DSH. ${fix}`
    return `dshloop: the port chosen for this profile's dshloop was taken meanwhile; trying another (${last}).`
  }
  return `dshloop: this profile's dshloop stopped (${exit}): ${last} (its log: ${logPath}). ${fix}`
}

/** A loopback port nobody listens on now (dshloop's serve takes a port number, not 0). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const probe = createServer()
    probe.once('error', reject)
    probe.listen(0, '127.0.0.1', () => {
      const address = probe.address()
      const port = typeof address === 'object' && address !== null ? address.port : 0
      probe.close(() => resolve(port))
    })
  })
}

// The listener goes when the timer fires: the polls below sleep thousands of times on one signal.
const sleep = (ms: number, signal: AbortSignal): Promise<void> => new Promise(resolve => {
  const wake = (): void => {
    clearTimeout(timer)
    signal.removeEventListener('abort', wake)
    resolve()
  }
  const timer = setTimeout(wake, ms)
  signal.addEventListener('abort', wake, { once: true })
})

/** How a child ended, in words. */
function exitWords(code: number | null, signal: NodeJS.Signals | null): string {
  return signal !== null ? `signal ${signal}` : `exit code ${String(code)}`
}

export class OwnDshloop {
  private readonly stopping = new AbortController()
  private child: ChildProcess | undefined
  private bootstrapping: ChildProcess | undefined
  private running: Promise<void> | undefined
  private readonly logPath: string
  private readonly options: OwnDshloopOptions

  constructor(options: OwnDshloopOptions) {
    this.options = options
    this.logPath = join(options.dataDir, 'dshloop.log')
  }

  start(): void {
    // Private before anything is written there: the database keeps panel sign-ins, the key signs them.
    mkdirSync(this.options.dataDir, { recursive: true, mode: 0o700 })
    chmodSync(this.options.dataDir, 0o700)
    this.running = this.supervise().catch((error: unknown) => {
      this.options.logger.warn(`dshloop: the profile's dshloop is no longer supervised: ${String(error)}`)
    })
  }

  async stop(): Promise<void> {
    this.stopping.abort()
    this.bootstrapping?.kill('SIGTERM') // a first turn it waits for would outlive DSH otherwise
    const child = this.child
    if (child !== undefined && child.exitCode === null && child.signalCode === null) {
      const exited = new Promise<void>(resolve => child.once('exit', () => resolve()))
      child.kill('SIGTERM') // serve stops its scheduler and exits within its own 15 s
      const timer = setTimeout(() => child.kill('SIGKILL'), STOP_TIMEOUT_MS)
      await exited
      clearTimeout(timer)
    }
    await this.running
  }

  private env(): NodeJS.ProcessEnv {
    const env: NodeJS.ProcessEnv = { ...(this.options.env ?? process.env) }
    for (const name of NOT_INHERITED) delete env[name]
    return { ...env, DSHLOOP_VAR_DIR: this.options.dataDir, DSHLOOP_HOST: 'dsh', PYTHONUNBUFFERED: '1' }
  }

  private async supervise(): Promise<void> {
    const signal = this.stopping.signal
    let failures = 0
    let lockHeld = 0
    let said: string | undefined
    const say = (why: string, then = ''): void => {
      if (why !== said) this.options.logger.warn(`${why}${then}`) // a failure that repeats is said once
      said = why
    }
    while (!signal.aborted) {
      const dshUrl = await this.waitForDsh(signal)
      if (dshUrl === undefined) return
      const port = this.options.port || await freePort()
      const url = `http://127.0.0.1:${port}`
      const started = Date.now()
      const outcome = await this.runOnce(dshUrl, port, url, signal)
      if (signal.aborted) return
      if (outcome.exitCode === LOCK_HELD_EXIT) {
        // Right after a DSH restart the last DSH's dshloop may still be stopping (it holds the lock
        // until its scheduler has stopped): a few quick tries before taking it for another DSH's.
        lockHeld += 1
        if (lockHeld < LOCK_HELD_QUICK_TRIES) {
          await sleep(1_000, signal)
          continue
        }
        say(`dshloop: another DSH runs this profile's dshloop (${this.options.dataDir}); this one starts none and ` +
          'its loop tools answer once that DSH stops and this one takes over')
        await sleep(LOCK_HELD_RETRY_MS, signal)
        continue
      }
      lockHeld = 0
      if (Date.now() - started >= HEALTHY_AFTER_MS) failures = 0
      const delay = RESTART_BACKOFF_MS[Math.min(failures, RESTART_BACKOFF_MS.length - 1)] ?? 30_000
      failures += 1
      say(outcome.why, ` Restarting it in ${delay / 1000} s.`)
      await sleep(delay, signal)
    }
  }

  /** Resolves once DSH listens (dshloop is told where to deliver), or undefined when stopping. */
  private async waitForDsh(signal: AbortSignal): Promise<string | undefined> {
    for (;;) {
      const url = this.options.dshUrl()
      if (url !== undefined) return url
      if (signal.aborted) return undefined
      await sleep(POLL_MS, signal)
    }
  }

  private logSize(): number {
    try {
      return statSync(this.logPath).size
    } catch {
      return 0
    }
  }

  private logSince(offset: number): string {
    let descriptor: number | undefined
    try {
      descriptor = openSync(this.logPath, 'r')
      const buffer = Buffer.alloc(Math.min(Math.max(this.logSize() - offset, 0), 64 * 1024))
      readSync(descriptor, buffer, 0, buffer.length, Math.max(offset, this.logSize() - buffer.length))
      return buffer.toString('utf8')
    } catch {
      return ''
    } finally {
      if (descriptor !== undefined) closeSync(descriptor)
    }
  }

  /** Run one command to its end (migrate, bootstrap), its output to the log. */
  private async once(args: readonly string[], dshUrl: string): Promise<{ code: number | null; error?: string; exit: string }> {
    const log = openSync(this.logPath, 'a', 0o600)
    try {
      const child = spawn(this.options.command, args, { stdio: ['ignore', log, log], env: { ...this.env(), DSHLOOP_DSH_URL: dshUrl }, detached: true })
      this.child = child
      return await new Promise(resolve => {
        child.once('error', error => resolve({ code: null, error: (error as NodeJS.ErrnoException).code ?? String(error), exit: 'not started' }))
        child.once('exit', (code, sig) => resolve({ code, exit: exitWords(code, sig) }))
      })
    } finally {
      closeSync(log)
    }
  }

  private async runOnce(dshUrl: string, port: number, url: string, signal: AbortSignal): Promise<{ why: string; exitCode?: number | null }> {
    const { command } = this.options
    const offset = this.logSize()
    // Every start: a new database is made, an upgraded dshloop's new migrations applied.
    const migrated = await this.once(['migrate', '--noinput', '-v', '0'], dshUrl)
    if (signal.aborted) return { why: 'stopping' }
    if (migrated.code !== 0) return { why: startFailure(command, migrated.error, this.logSince(offset), `migrate: ${migrated.exit}`, this.logPath, this.options.port) }

    const log = openSync(this.logPath, 'a', 0o600)
    let child: ChildProcess
    try {
      child = spawn(command, ['serve', `127.0.0.1:${port}`, '--plugin-token-fd', '3', '--exit-with-stdin', '--lock-file', join(this.options.dataDir, 'serve.lock')], {
        // stdin: a pipe this process holds until it ends (serve --exit-with-stdin); 3: the token.
        stdio: ['pipe', log, log, 'pipe'],
        env: { ...this.env(), DSHLOOP_DSH_URL: dshUrl },
        // Its own process group: DSH's terminal's Ctrl-C reaches DSH, which stops dshloop in order.
        detached: true,
      })
    } finally {
      closeSync(log)
    }
    this.child = child
    const ended = new Promise<{ code: number | null; error?: string; exit: string }>(resolve => {
      child.once('error', error => resolve({ code: null, error: (error as NodeJS.ErrnoException).code ?? String(error), exit: 'not started' }))
      child.once('exit', (code, sig) => resolve({ code, exit: exitWords(code, sig) }))
    })
    const handover = child.stdio[3] as NodeJS.WritableStream | null | undefined
    handover?.on('error', () => {}) // a child that died first: its end of the pipe is gone
    handover?.end(`${this.options.token}\n`)
    child.stdin?.on('error', () => {})

    const ready = await Promise.race([this.waitForHealth(url, signal), ended.then(() => false)])
    if (ready) {
      this.options.onUrl(url)
      this.options.logger.info(`dshloop: this profile's dshloop serves ${url} (pid ${String(child.pid)}, data in ${this.options.dataDir})`)
      void this.bootstrap(dshUrl)
    }
    const end = await ended
    if (signal.aborted) return { why: 'stopping' }
    if (end.error !== undefined || !ready) return { why: startFailure(command, end.error, this.logSince(offset), end.exit, this.logPath, this.options.port), exitCode: end.code }
    return { why: `dshloop: this profile's dshloop (pid ${String(child.pid)}) exited unexpectedly with ${end.exit}.`, exitCode: end.code }
  }

  private async waitForHealth(url: string, signal: AbortSignal): Promise<boolean> {
    const deadline = Date.now() + READY_TIMEOUT_MS
    while (!signal.aborted && Date.now() < deadline) {
      try {
        // Any answer will do: health says 503 while DSH itself is still booting.
        await fetch(`${url}/api/health`, { signal: AbortSignal.timeout(2_000) })
        return true
      } catch {
        await sleep(POLL_MS, signal)
      }
    }
    return false
  }

  /** `self` out of the box: bootstrap makes the global interface session in DSH once DSH answers. */
  private async bootstrap(dshUrl: string): Promise<void> {
    const signal = this.stopping.signal
    const deadline = Date.now() + READY_TIMEOUT_MS
    while (!signal.aborted && Date.now() < deadline) {
      try {
        const answer = await fetch(`${dshUrl}/api/host.describe`, {
          method: 'POST',
          headers: { 'Content-Type': 'application/json' },
          body: JSON.stringify({ type: 'client-request', rpcId: 'dshloop-ready', method: 'host.describe', payload: {} }),
          signal: AbortSignal.timeout(2_000),
        })
        if (answer.ok) break
      } catch {
        // DSH still booting
      }
      await sleep(POLL_MS, signal)
    }
    if (signal.aborted) return
    const log = openSync(this.logPath, 'a', 0o600)
    try {
      // Its stdout (a first admin password and API token) is not kept: nothing secret at rest here.
      const child = spawn(this.options.command, ['bootstrap'], { stdio: ['ignore', 'ignore', log], env: { ...this.env(), DSHLOOP_DSH_URL: dshUrl } })
      child.on('error', () => {})
      this.bootstrapping = child
    } finally {
      closeSync(log)
    }
  }
}
