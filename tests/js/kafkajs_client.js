// KafkaJS against a Kafka-wire listener: `node kafkajs_client.js HOST:PORT OUT.json`.
// For each codec (none, gzip, snappy, lz4, zstd) an idempotent producer sends records
// with keys, headers, producer timestamps and a tombstone to topic "js-<codec>"; one
// consumer group reads all five topics, commits, and the admin client fetches the
// committed offsets. Writes one JSON object with what it saw to OUT.json (not stdout: a
// pipe may still hold it when the process exits); tests/test_kafka_kafkajs.py
// checks it against the WAL. Bounded: the whole run stops after 90 s.
'use strict'

const fs = require('fs')
const { Kafka, CompressionTypes, CompressionCodecs, logLevel } = require('kafkajs')
const SnappyCodec = require('kafkajs-snappy')
const lz4 = require('lz4-wasm-nodejs')
const { ZstdCodec } = require('zstd-codec')

const N = 200
const CODECS = ['none', 'gzip', 'snappy', 'lz4', 'zstd']

// LZ4 frame (the format Kafka uses for v2 batches) around lz4-wasm-nodejs's block
// compressor: magic, FLG 0x60 (version 1, independent blocks, no checksums, no content
// size), BD 0x40 (64 KiB blocks), header checksum 0x82 (xxh32 of FLG BD, second byte),
// then per 64 KiB of input a block (u32 LE size, high bit set when stored raw), then an
// end mark. lz4-wasm-nodejs prefixes each block with its u32 LE decompressed size.
const LZ4_HEADER = Buffer.from([0x04, 0x22, 0x4d, 0x18, 0x60, 0x40, 0x82])
const LZ4_BLOCK = 64 * 1024
const Lz4FrameCodec = () => ({
  async compress(encoder) {
    const input = encoder.buffer
    const parts = [LZ4_HEADER]
    for (let at = 0; at < input.length; at += LZ4_BLOCK) {
      const raw = input.subarray(at, at + LZ4_BLOCK)
      const packed = Buffer.from(lz4.compress(raw)).subarray(4)
      const size = Buffer.alloc(4)
      if (packed.length < raw.length) {
        size.writeUInt32LE(packed.length)
        parts.push(size, packed)
      } else {
        size.writeUInt32LE((raw.length | 0x80000000) >>> 0)
        parts.push(size, raw)
      }
    }
    parts.push(Buffer.alloc(4))
    return Buffer.concat(parts)
  },
  async decompress() {
    throw new Error('not needed: the listener serves uncompressed batches')
  },
})

const ZstdCodecFactory = () =>
  new Promise(resolve => {
    ZstdCodec.run(zstd => {
      const simple = new zstd.Simple()
      resolve({
        async compress(encoder) {
          return Buffer.from(simple.compress(encoder.buffer, 3))
        },
        async decompress(buffer) {
          return Buffer.from(simple.decompress(buffer))
        },
      })
    })
  })

async function main() {
  const [bootstrap, outPath] = process.argv.slice(2)
  CompressionCodecs[CompressionTypes.Snappy] = SnappyCodec
  CompressionCodecs[CompressionTypes.LZ4] = Lz4FrameCodec
  const zstd = await ZstdCodecFactory()
  CompressionCodecs[CompressionTypes.ZSTD] = () => zstd

  const kafka = new Kafka({ clientId: 'walfs-kafkajs', brokers: [bootstrap], logLevel: logLevel.WARN })
  const out = { produced: {}, consumed: {}, committed: {} }

  const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1, allowAutoTopicCreation: true })
  await producer.connect()
  const types = {
    none: CompressionTypes.None,
    gzip: CompressionTypes.GZIP,
    snappy: CompressionTypes.Snappy,
    lz4: CompressionTypes.LZ4,
    zstd: CompressionTypes.ZSTD,
  }
  for (const codec of CODECS) {
    const messages = []
    for (let i = 0; i < N; i++) {
      messages.push({
        key: `k${i % 5}`,
        value: i === N - 1 ? null : `${codec} record ${i} `.repeat(4),
        headers: { i: String(i) },
        timestamp: String(1700000000000 + i),
      })
    }
    const meta = await producer.send({ topic: `js-${codec}`, compression: types[codec], acks: -1, messages })
    out.produced[codec] = meta.map(m => ({ partition: m.partition, baseOffset: m.baseOffset, error: m.errorCode }))
  }
  await producer.disconnect()

  const consumer = kafka.consumer({ groupId: 'js-group', sessionTimeout: 10000, heartbeatInterval: 1000 })
  await consumer.connect()
  for (const codec of CODECS) await consumer.subscribe({ topic: `js-${codec}`, fromBeginning: true })
  let seen = 0
  const done = new Promise(resolve => {
    consumer.run({
      autoCommit: false,
      eachMessage: async ({ topic, partition, message }) => {
        const codec = topic.slice(3)
        ;(out.consumed[codec] = out.consumed[codec] || []).push([
          message.offset,
          message.key && message.key.toString(),
          message.value === null ? null : message.value.toString(),
          message.headers.i.toString(),
          message.timestamp,
        ])
        await consumer.commitOffsets([{ topic, partition, offset: String(Number(message.offset) + 1) }])
        if (++seen === N * CODECS.length) resolve()
      },
    })
  })
  await done
  await consumer.disconnect()

  const admin = kafka.admin()
  await admin.connect()
  for (const codec of CODECS) {
    const got = await admin.fetchOffsets({ groupId: 'js-group', topics: [`js-${codec}`] })
    out.committed[codec] = got[0].partitions.map(p => [p.partition, p.offset, p.metadata])
  }
  // The admin client on topic configs, partitions and record deletion.
  const { ConfigResourceTypes } = require('kafkajs')
  const topic = { type: ConfigResourceTypes.TOPIC, name: 'js-none' }
  await admin.alterConfigs({
    validateOnly: false,
    resources: [{ ...topic, configEntries: [{ name: 'retention.ms', value: '86400000' }] }],
  })
  const described = await admin.describeConfigs({ includeSynonyms: false, resources: [topic] })
  out.configs = described.resources[0].configEntries
    .filter(e => ['retention.ms', 'cleanup.policy'].includes(e.configName))
    .map(e => [e.configName, e.configValue])
    .sort()
  try {
    await admin.alterConfigs({
      validateOnly: false,
      resources: [{ ...topic, configEntries: [{ name: 'cleanup.policy', value: 'compact' }] }],
    })
    out.compact = 'accepted'
  } catch (e) {
    out.compact = e.type || String(e)
  }
  await admin.createPartitions({ topicPartitions: [{ topic: 'js-none', count: 3 }] })
  const md = await admin.fetchTopicMetadata({ topics: ['js-none'] })
  out.partitions = md.topics[0].partitions.length
  // KafkaJS's admin knows a topic's leader only once it looked the topic up.
  await admin.fetchTopicMetadata({ topics: ['js-gzip'] })
  try {
    await admin.deleteTopicRecords({ topic: 'js-gzip', partitions: [{ partition: 0, offset: '50' }] })
  } catch (e) {
    throw new Error(`deleteTopicRecords: ${JSON.stringify(e.partitions || e)}`)
  }
  out.afterDelete = (await admin.fetchTopicOffsets('js-gzip')).map(p => [p.partition, p.low, p.high])
  await admin.disconnect()
  fs.writeFileSync(outPath, JSON.stringify(out))
}

const timer = setTimeout(() => {
  process.stderr.write('kafkajs_client.js: timed out\n')
  process.exit(3)
}, 90000)
main().then(
  () => {
    clearTimeout(timer)
    process.exit(0)
  },
  err => {
    process.stderr.write(`kafkajs_client.js: ${err.stack || err}\n`)
    process.exit(2)
  }
)
