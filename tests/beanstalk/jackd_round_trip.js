// A producer and a worker through the beanstalkd commands with jackd (npm),
// used as its README shows, against the server at HOST PORT; then a worker
// process that is killed while it holds a reservation, whose job comes back.
// Prints "ok" and exits 0 when every check holds.
//
// Usage: node jackd_round_trip.js HOST PORT TUBE
//        node jackd_round_trip.js HOST PORT TUBE --hold   (the worker that is killed)
//
// jackd's pauseTube sends no line end, so pause-tube is left to the Python client.

'use strict'

const assert = require('assert')
const { spawn } = require('child_process')
const readline = require('readline')
const Jackd = require('jackd')

const [host, portText, tube, mode] = process.argv.slice(2)
const port = Number(portText)

async function connect () {
  const client = new Jackd()
  await client.connect({ host, port })
  return client
}

async function expectError (reply, promise) {
  try {
    await promise
  } catch (error) {
    assert.ok(error.message.startsWith(reply), `expected ${reply}, got ${error.message}`)
    return
  }
  assert.fail(`expected ${reply}`)
}

function field (yaml, key) {
  const line = yaml.split('\n').find(entry => entry.startsWith(`${key}: `))
  assert.ok(line, `no ${key} in ${yaml}`)
  return line.slice(key.length + 2)
}

async function hold () {
  const worker = await connect()
  await worker.watch(tube)
  await worker.ignore('default')
  const { id } = await worker.reserveWithTimeout(10)
  console.log(id)
  await new Promise(resolve => setTimeout(resolve, 3600 * 1000))
}

async function roundTrip () {
  const producer = await connect()
  const worker = await connect()
  assert.strictEqual(await producer.use(tube), tube)
  assert.strictEqual(await producer.listTubeUsed(), tube)
  assert.strictEqual(await worker.watch(tube), 2)
  assert.strictEqual(await worker.ignore('default'), 1)
  await expectError('NOT_IGNORED', worker.ignore(tube))
  assert.ok((await worker.listTubesWatched()).includes(`- ${tube}\n`))

  const normal = await producer.put('normal', { priority: 1024 })
  const urgent = await producer.put({ urgent: true }, { priority: 0 })
  const parked = await producer.put(Buffer.from('parked'), { delay: 60 })
  assert.strictEqual((await producer.peek(normal)).payload.toString(), 'normal')
  assert.strictEqual((await producer.peekReady()).id, urgent)
  assert.strictEqual((await producer.peekDelayed()).id, parked)
  const stats = await producer.statsJob(normal)
  assert.strictEqual(field(stats, 'state'), 'ready')
  assert.strictEqual(field(stats, 'pri'), '1024')

  let job = await worker.reserve()
  assert.deepStrictEqual([job.id, JSON.parse(job.payload.toString())], [urgent, { urgent: true }])
  await worker.touch(job.id)
  await worker.release(job.id, { priority: 0, delay: 0 })
  job = await worker.reserveWithTimeout(5)
  assert.strictEqual(job.id, urgent)
  await worker.bury(job.id, 0)
  assert.strictEqual((await producer.peekBuried()).id, urgent)
  assert.strictEqual(field(await producer.statsTube(tube), 'current-jobs-buried'), '1')
  assert.strictEqual(await producer.kick(10), 1)
  job = await worker.reserveWithTimeout(5)
  assert.strictEqual(job.id, urgent)
  await worker.delete(job.id)
  await expectError('NOT_FOUND', producer.peek(urgent))

  job = await worker.reserveWithTimeout(5)
  assert.strictEqual(job.id, normal)
  await worker.delete(job.id)
  await expectError('TIMED_OUT', worker.reserveWithTimeout(0))
  await producer.kickJob(parked)
  job = await worker.reserveWithTimeout(5)
  assert.strictEqual(job.id, parked)
  await worker.delete(job.id)
  await expectError('NOT_FOUND', worker.reserveJob(parked))
  const byId = await producer.put('by id', { delay: 60 })
  job = await worker.reserveJob(byId)
  assert.deepStrictEqual([job.id, job.payload.toString()], [byId, 'by id'])
  await worker.delete(job.id)

  assert.ok((await producer.listTubes()).includes(`- ${tube}\n`))
  assert.ok(Number(field(await producer.stats(), 'cmd-put')) >= 3)

  // A worker process killed while it holds a reservation: the job comes back at once.
  const dying = await producer.put('dying', { ttr: 120 })
  const child = spawn(process.execPath, [__filename, host, portText, tube, '--hold'], { stdio: ['ignore', 'pipe', 'inherit'] })
  const [heldId] = await readline.createInterface({ input: child.stdout })[Symbol.asyncIterator]().next().then(line => [line.value])
  assert.strictEqual(heldId, dying)
  assert.strictEqual(field(await producer.statsJob(dying), 'state'), 'reserved')
  const exited = new Promise(resolve => child.once('exit', resolve))
  child.kill('SIGKILL')
  await exited
  const killedAt = Date.now()
  job = await worker.reserveWithTimeout(30)
  assert.strictEqual(job.id, dying)
  assert.ok(Date.now() - killedAt < 10000, 'released on close, not after its ttr')
  await worker.delete(job.id)

  await producer.disconnect()
  await worker.disconnect()
}

const run = mode === '--hold' ? hold : roundTrip
run().then(() => {
  if (mode !== '--hold') console.log('ok')
}, error => {
  console.error(error)
  process.exit(1)
})
