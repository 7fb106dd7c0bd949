import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { fstatSync, mkdtempSync, openSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { test } from 'node:test'
import { takeToken } from '../src/token.ts'

const TOKEN = 'dsh_handed_over_on_a_pipe'

function closed(fd: number): boolean {
  try {
    fstatSync(fd)
    return false
  } catch (error) {
    return (error as { code?: string }).code === 'EBADF'
  }
}

test('the token comes from the pipe DSHLOOP_TOKEN_FD names, which is closed after', async () => {
  // A real process with an inherited pipe on fd 3, as run-dsh.sh starts DSH.
  const script = `
    import { fstatSync } from 'node:fs'
    import { takeToken } from ${JSON.stringify(new URL('../src/token.ts', import.meta.url).href)}
    const taken = takeToken()
    let open = true
    try { fstatSync(3) } catch { open = false }
    process.stdout.write(JSON.stringify({ ...taken, open }))
  `
  const child = spawn(process.execPath, ['--input-type=module', '-e', script], {
    stdio: ['ignore', 'pipe', 'inherit', 'pipe'],
    env: { ...process.env, DSHLOOP_TOKEN: undefined, DSHLOOP_TOKEN_FD: '3' },
  })
  const pipe = child.stdio[3] as NodeJS.WritableStream
  pipe.end(`${TOKEN}\n`)
  let out = ''
  child.stdout!.on('data', chunk => { out += chunk })
  const code = await new Promise(resolve => child.on('close', resolve))
  assert.equal(code, 0)
  assert.deepEqual(JSON.parse(out), { token: TOKEN, warnings: [], open: false })
})

test('a descriptor of a file is read and closed too', () => {
  const dir = mkdtempSync(join(tmpdir(), 'dshloop-token-'))
  try {
    const file = join(dir, 'token')
    writeFileSync(file, ` ${TOKEN} \n`)
    const fd = openSync(file, 'r')
    assert.deepEqual(takeToken({ DSHLOOP_TOKEN_FD: String(fd) }), { token: TOKEN, warnings: [] })
    assert.ok(closed(fd))
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
})

test('DSHLOOP_TOKEN in the environment is a last resort, said to be exposed; a descriptor wins over it', () => {
  const fallback = takeToken({ DSHLOOP_TOKEN: TOKEN })
  assert.equal(fallback.token, TOKEN)
  assert.match(fallback.warnings.join('\n'), /from DSHLOOP_TOKEN in the DSH process environment .* exposed/)
  assert.doesNotMatch(fallback.warnings.join('\n'), new RegExp(TOKEN))

  const descriptors = { read: () => 'dsh_from_the_pipe\n', close() {} }
  const both = takeToken({ DSHLOOP_TOKEN: TOKEN, DSHLOOP_TOKEN_FD: '3' }, descriptors)
  assert.equal(both.token, 'dsh_from_the_pipe')
  assert.match(both.warnings.join('\n'), /DSHLOOP_TOKEN in the DSH process environment is ignored/)
  assert.doesNotMatch(both.warnings.join('\n'), new RegExp(TOKEN))
})

test('stdin, stdout and stderr are never taken; a bad or closed descriptor is no token, not a crash', () => {
  const seen: number[] = []
  const descriptors = { read: (fd: number) => { seen.push(fd); return TOKEN }, close: () => {} }
  for (const named of ['0', '1', '2', '-1', '3.5', 'three', ' 4']) {
    const taken = takeToken({ DSHLOOP_TOKEN_FD: named }, descriptors)
    assert.equal(taken.token, '', named)
    assert.match(taken.warnings[0] ?? '', /is not a file descriptor number of 3 or more/, named)
  }
  assert.deepEqual(seen, [])

  const unreadable = takeToken({ DSHLOOP_TOKEN_FD: '987' })
  assert.equal(unreadable.token, '')
  assert.match(unreadable.warnings[0] ?? '', /could not read the token from descriptor 987 \(EBADF\)/)

  const empty = takeToken({ DSHLOOP_TOKEN_FD: '5' }, { read: () => '\n', close: () => {} })
  assert.equal(empty.token, '')
  assert.match(empty.warnings[0] ?? '', /descriptor 5 held no token/)
})
