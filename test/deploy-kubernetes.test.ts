/**
 * deploy/kubernetes: every manifest validates offline against the Kubernetes API
 * schemas (the kubernetes-models packages' validators; the ServiceMonitor against the
 * prometheus-operator CRD schema), the policy ConfigMap made from policies/ as
 * `kubectl create configmap --from-file=policies/` makes it validates too, and the
 * manifests refer to each other by names that exist.
 */
import fs from 'node:fs'
import path from 'node:path'
import t from 'tap'
import { parseAllDocuments } from 'yaml'

const DIR = path.resolve(__dirname, '../../deploy/kubernetes')
const POLICIES = path.resolve(__dirname, '../../policies')

// Both packages are ES modules only; this CommonJS build loads them with a real import().
// eslint-disable-next-line no-new-func
const importEsm = new Function('specifier', 'return import(specifier)') as (s: string) => Promise<Record<string, new (doc: object) => { validate (): void }>>

interface Doc { apiVersion: string, kind: string, metadata: { name: string, labels?: Record<string, string> }, [key: string]: any }

async function model (apiVersion: string, kind: string): Promise<new (doc: object) => { validate (): void }> {
  const module = apiVersion === 'monitoring.coreos.com/v1'
    ? '@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1'
    : `kubernetes-models/${apiVersion}`
  const m = await importEsm(module)
  const cls = m[kind]
  if (cls === undefined) throw new Error(`no model for ${apiVersion} ${kind}`)
  return cls
}

const docs: Doc[] = []
for (const file of fs.readdirSync(DIR).filter((f) => f.endsWith('.yaml')).sort()) {
  for (const d of parseAllDocuments(fs.readFileSync(path.join(DIR, file), 'utf8'))) {
    if (d.errors.length) throw new Error(`${file}: ${d.errors[0]!.message}`)
    docs.push(d.toJS() as Doc)
  }
}

t.test('every manifest validates against its schema', async (t) => {
  t.same(docs.map((d) => d.kind).sort(), ['ConfigMap', 'DaemonSet', 'NetworkPolicy', 'Secret', 'Service', 'ServiceMonitor'])
  for (const doc of docs) {
    const Model = await model(doc.apiVersion, doc.kind)
    t.doesNotThrow(() => new Model(doc).validate(), `${doc.kind} ${doc.metadata.name}`)
  }
  // The validators do catch a broken manifest.
  const ds = structuredClone(docs.find((d) => d.kind === 'DaemonSet')!)
  ds.spec.template.spec.containers[0].ports[0].containerPort = 'http'
  const DaemonSet = await model('apps/v1', 'DaemonSet')
  t.throws(() => new DaemonSet(ds).validate(), /containerPort/)
  const sm = structuredClone(docs.find((d) => d.kind === 'ServiceMonitor')!)
  sm.spec.endpoints[0].interval = 30
  const ServiceMonitor = await model('monitoring.coreos.com/v1', 'ServiceMonitor')
  t.throws(() => new ServiceMonitor(sm).validate(), /interval/)
})

t.test('the policy ConfigMap made from policies/ validates', async (t) => {
  const data = Object.fromEntries(fs.readdirSync(POLICIES).filter((f) => fs.statSync(path.join(POLICIES, f)).isFile()).map((f) => [f, fs.readFileSync(path.join(POLICIES, f), 'utf8')]))
  t.ok(data['policy.yaml'] && data['model.conf'] && data['base.csv'])
  const ConfigMap = await model('v1', 'ConfigMap')
  t.doesNotThrow(() => new ConfigMap({ apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'portcullis-policy', namespace: 'portcullis' }, data }).validate())
})

t.test('the manifests refer to names that exist', async (t) => {
  const ds = docs.find((d) => d.kind === 'DaemonSet')!
  const pod = ds.spec.template
  const svc = docs.find((d) => d.kind === 'Service')!
  const sm = docs.find((d) => d.kind === 'ServiceMonitor')!
  const np = docs.find((d) => d.kind === 'NetworkPolicy')!
  t.match(pod.metadata.labels, svc.spec.selector, 'the Service selects the gateway pods')
  t.match(pod.metadata.labels, np.spec.podSelector.matchLabels, 'the NetworkPolicy applies to them')
  t.match(svc.metadata.labels, sm.spec.selector.matchLabels, 'the ServiceMonitor selects the Service')
  t.ok(svc.spec.ports.some((p: { name: string }) => p.name === sm.spec.endpoints[0].port), 'by a port name it has')
  const names = new Set(docs.map((d) => `${d.kind}/${d.metadata.name}`))
  names.add('ConfigMap/portcullis-policy') // made from policies/ (above)
  for (const v of pod.spec.volumes) {
    if (v.configMap) t.ok(names.has(`ConfigMap/${v.configMap.name}`), `ConfigMap ${v.configMap.name}`)
    if (v.secret) t.ok(names.has(`Secret/${v.secret.secretName}`), `Secret ${v.secret.secretName}`)
  }
  const c = pod.spec.containers[0]
  t.equal(pod.spec.securityContext.runAsNonRoot, true)
  t.equal(c.securityContext.allowPrivilegeEscalation, false)
  t.equal(c.livenessProbe.httpGet.path, '/healthz')
  // The config the ConfigMap carries is the one the container is started with.
  const cm = docs.find((d) => d.kind === 'ConfigMap' && d.metadata.name === 'portcullis-config')!
  t.ok(c.args.includes('/etc/portcullis/portcullis.yaml') && cm.data['portcullis.yaml'].includes('policy: { dir: /etc/portcullis/policies }'))
})
