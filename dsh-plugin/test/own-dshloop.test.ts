import assert from 'node:assert/strict'
import { pathToFileURL } from 'node:url'
import { test } from 'node:test'
import { externalUrl, profileDataDir } from '../src/index.ts'
import { makeToken, startFailure } from '../src/own-dshloop.ts'

const LOG = '/home/me/.dsh/profiles/web/dshloop/dshloop.log'

test('a DSHLOOP_URL, or a launcher handing a token over, means an external dshloop; nothing means the profile runs its own', () => {
  assert.equal(externalUrl({ url: 'http://127.0.0.1:8123' }, {}), 'http://127.0.0.1:8123')
  assert.equal(externalUrl({ url: '' }, { DSHLOOP_URL: 'http://127.0.0.1:9000' }), 'http://127.0.0.1:9000')
  assert.equal(externalUrl({ url: '' }, { DSHLOOP_TOKEN_FD: '3' }), 'http://127.0.0.1:8000')
  assert.equal(externalUrl({ url: '' }, {}), undefined)
  assert.equal(externalUrl({}, { DSHLOOP_URL: '' }), undefined)
})

test("the profile's dshloop lives in the profile's own directory", () => {
  assert.equal(profileDataDir({ baseUrl: pathToFileURL('/h/profiles/work').href + '/' }, {}), '/h/profiles/work/dshloop')
  assert.equal(profileDataDir({}, { DSH_HOME: '/h' }), '/h/profiles/web/dshloop')
})

test("the plugin's token has the shape and strength of dshloop's own, new each time", () => {
  const token = makeToken()
  assert.match(token, /^dsh_[A-Za-z0-9_-]{43}$/)
  assert.notEqual(token, makeToken())
})

test('a start that fails is one line with the fix, and says DSH Web keeps working', () => {
  const missing = startFailure('dshloop', 'ENOENT', '', 'not started', LOG)
  assert.match(missing, /no "dshloop" command on DSH's PATH\. Install it \(pip install dshloop, Python 3\.11 or newer\) or set DSHLOOP_COMMAND/)
  assert.match(missing, /DSH Web keeps working, without loops/)
  assert.doesNotMatch(missing, /\n/)

  const old = startFailure('/opt/old/bin/dshloop', undefined, '  File "x", line 3\n    match x:\nSyntaxError: invalid syntax\n', 'exit code 1', LOG)
  assert.match(old, /needs Python 3\.11 or newer \(\/opt\/old\/bin\/dshloop said: SyntaxError: invalid syntax\)/)

  const taken = startFailure('dshloop', undefined, 'ERROR:    [Errno 98] error while attempting to bind on address (\'127.0.0.1\', 8000): address already in use\n', 'exit code 1', LOG)
  assert.match(taken, /port chosen for this profile's dshloop was taken meanwhile; trying another/)
  const fixed = startFailure('dshloop', undefined, '[Errno 98] address already in use\n', 'exit code 1', LOG, 8000)
  assert.match(fixed, /port 8000 \(DSHLOOP_PORT\) is taken: free it, or set DSHLOOP_PORT to another port or unset it/)

  const other = startFailure('dshloop', undefined, 'django.core.exceptions.ImproperlyConfigured: DSHLOOP_X is bad\n', 'exit code 1', LOG)
  assert.equal(other, `dshloop: this profile's dshloop stopped (exit code 1): django.core.exceptions.ImproperlyConfigured: DSHLOOP_X is bad (its log: ${LOG}). DSH Web keeps working, without loops, meanwhile.`)
})
