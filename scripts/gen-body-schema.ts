/**
 * Generates src/api/body/engine-schema.json: for every Engine API operation whose
 * request body is JSON, the shape of that body as the engine's Go decoder sees it, the
 * UNION over the spec versions the gateway supports (engine-api-v1.41.yaml and
 * engine-api-v1.56.yaml in spec/). src/api/body/decode.ts uses it to know,
 * for every object in a body, whether it is a Go struct (field names matched
 * case-insensitively, canonical spelling known) or a map (keys exact).
 *
 *   node dist/scripts/gen-body-schema.js            write the file
 *   node dist/scripts/gen-body-schema.js --check    exit 1 if the committed file is stale
 *
 * Trees:
 *   { "t": "struct", "f": { "<Field>": <tree>, ... } }  a Go struct; the spec's field spelling
 *   { "t": "map", "v": <tree> }                         a map with exact keys, values <tree>
 *   { "t": "array", "i": <tree> }                       an array of <tree>
 *   { "t": "any" }                                      a scalar, or nothing known
 *
 * Spec -> tree: `$ref: "#/definitions/X"` is followed; `allOf` parts are merged (Go
 * embedding); `properties` make a struct; `additionalProperties` (with no properties)
 * a map; `type: array` with `items` an array; anything else `any`. A recursive
 * definition (none today) would end in `any` where it recurs.
 *
 * Union of two trees: `any` yields to the other; two structs merge field by field
 * (fields whose names differ only in case are one Go field: the newest version's spelling
 * wins); two maps or two arrays merge their element trees. Any other combination is a
 * conflict the generator refuses to guess about.
 *
 * CORRECTIONS (below) adds what the Go types decode and the spec leaves out, checked
 * against the engine's sources; each names the definition it patches and fails loudly if
 * a spec file no longer has it.
 *
 * Body parameters that are raw bytes (`type: string`: tar archives, image content) are
 * not JSON and get no entry.
 *
 * Output is deterministic: keys sorted, one field per line, `{"t":"any"}` leaves inline.
 */
import fs from 'node:fs'
import path from 'node:path'
import YAML from 'yaml'

export type Tree =
  | { readonly t: 'struct', readonly f: { readonly [field: string]: Tree } }
  | { readonly t: 'map', readonly v: Tree }
  | { readonly t: 'array', readonly i: Tree }
  | { readonly t: 'any' }

export interface BodySchemaFile {
  readonly generatedFrom: readonly string[]
  readonly operations: { readonly [operationId: string]: Tree }
}

/** Spec files, oldest first (on a spelling conflict the later one wins). */
export const SPEC_FILES: readonly string[] = ['engine-api-v1.41.yaml', 'engine-api-v1.56.yaml']

const repoRoot = path.resolve(__dirname, '..', '..')
export const DEFAULT_SPEC_DIR = path.resolve(repoRoot, 'spec')
export const SCHEMA_PATH = path.join(repoRoot, 'src', 'api', 'body', 'engine-schema.json')

const ANY: Tree = Object.freeze({ t: 'any' })
const METHODS = new Set(['get', 'head', 'post', 'put', 'delete', 'patch', 'options'])

type Rec = Record<string, unknown>
function isRec (v: unknown): v is Rec {
  return typeof v === 'object' && v !== null && !Array.isArray(v)
}

/**
 * Where the spec and the engine's Go types disagree. The decoder treats an object as the
 * Go decoder does only if the schema says what it is; a field the spec misnames is merely
 * unknown (kept verbatim, case variants still refused), but policy could not find it.
 */
const CORRECTIONS: ReadonlyArray<{ readonly path: readonly string[], readonly why: string, readonly properties: Rec }> = [
  {
    // swarmkit api/runtime PluginSpec: Privileges []*PluginPrivilege `json:"privileges,omitempty"`,
    // Env []string `json:"env,omitempty"`; PluginPrivilege's tags are name, description, value.
    // The spec documents a `PluginPrivilege` field that the engine does not have.
    path: ['TaskSpec', 'properties', 'PluginSpec', 'properties'],
    why: 'TaskSpec.PluginSpec is swarmkit runtime.PluginSpec, with lower-case JSON tags',
    properties: {
      privileges: {
        type: 'array',
        items: { type: 'object', properties: { name: { type: 'string' }, description: { type: 'string' }, value: { type: 'array', items: { type: 'string' } } } },
      },
      env: { type: 'array', items: { type: 'string' } },
    },
  },
]

function applyCorrections (file: string, doc: Rec): void {
  const definitions = isRec(doc.definitions) ? doc.definitions : {}
  for (const c of CORRECTIONS) {
    let at: unknown = definitions
    for (const key of c.path) at = isRec(at) ? at[key] : undefined
    if (!isRec(at)) throw new Error(`${file}: correction "${c.why}": definitions.${c.path.join('.')} is gone; review CORRECTIONS`)
    for (const [name, schema] of Object.entries(c.properties)) {
      if (Object.keys(at).some((k) => k.toLowerCase() === name.toLowerCase())) {
        throw new Error(`${file}: correction "${c.why}": the spec now has ${name}; review CORRECTIONS`)
      }
      at[name] = schema
    }
  }
}

class SpecReader {
  private readonly definitions: Rec
  constructor (private readonly file: string, doc: Rec, private readonly notes: string[]) {
    this.definitions = isRec(doc.definitions) ? doc.definitions : {}
  }

  tree (schema: unknown, where: string, stack: readonly string[] = []): Tree {
    if (!isRec(schema)) return ANY
    if (typeof schema.$ref === 'string') {
      const m = /^#\/definitions\/(.+)$/.exec(schema.$ref)
      if (!m) throw new Error(`${this.file}: ${where}: unsupported $ref ${schema.$ref}`)
      const name = m[1]
      if (stack.includes(name)) return ANY
      if (!(name in this.definitions)) throw new Error(`${this.file}: ${where}: unknown definition ${name}`)
      return this.tree(this.definitions[name], name, [...stack, name])
    }
    let out: Tree = ANY
    if (Array.isArray(schema.allOf)) {
      schema.allOf.forEach((part, n) => { out = union(out, this.tree(part, `${where}.allOf[${n}]`, stack), where, this.notes) })
    }
    if (isRec(schema.properties)) {
      const f: Record<string, Tree> = {}
      const lower = new Set<string>()
      for (const [name, sub] of Object.entries(schema.properties)) {
        if (lower.has(name.toLowerCase())) throw new Error(`${this.file}: ${where}: two properties spelled ${name} ignoring case`)
        lower.add(name.toLowerCase())
        f[name] = this.tree(sub, `${where}.${name}`, stack)
      }
      out = union(out, { t: 'struct', f }, where, this.notes)
    } else if (schema.additionalProperties !== undefined && schema.additionalProperties !== false) {
      out = union(out, { t: 'map', v: this.tree(schema.additionalProperties, `${where}{}`, stack) }, where, this.notes)
    }
    if (schema.type === 'array' || schema.items !== undefined) {
      out = union(out, { t: 'array', i: this.tree(schema.items, `${where}[]`, stack) }, where, this.notes)
    }
    return out
  }

  /** operationId -> tree of its JSON body parameter. */
  bodies (doc: Rec): Map<string, Tree> {
    const out = new Map<string, Tree>()
    const paths = isRec(doc.paths) ? doc.paths : {}
    for (const [p, item] of Object.entries(paths)) {
      if (!isRec(item)) continue
      for (const [method, op] of Object.entries(item)) {
        if (!METHODS.has(method) || !isRec(op) || typeof op.operationId !== 'string') continue
        const params = Array.isArray(op.parameters) ? op.parameters : []
        for (const param of params) {
          if (!isRec(param) || param.in !== 'body') continue
          const schema = param.schema
          if (isRec(schema) && schema.type === 'string') continue // raw bytes, not JSON
          if (out.has(op.operationId)) throw new Error(`${this.file}: ${op.operationId} has two body parameters`)
          out.set(op.operationId, this.tree(schema, `${op.operationId} (${method.toUpperCase()} ${p})`))
        }
      }
    }
    return out
  }
}

/** The union of two trees (see the header); `where` names the place for errors. */
export function union (a: Tree, b: Tree, where: string, notes: string[] = []): Tree {
  if (a.t === 'any') return b
  if (b.t === 'any') return a
  if (a.t === 'struct' && b.t === 'struct') {
    const byLower = new Map<string, string>()
    const f: Record<string, Tree> = {}
    for (const [name, tree] of Object.entries(a.f)) { byLower.set(name.toLowerCase(), name); f[name] = tree }
    for (const [name, tree] of Object.entries(b.f)) {
      const prev = byLower.get(name.toLowerCase())
      if (prev === undefined) { byLower.set(name.toLowerCase(), name); f[name] = tree; continue }
      const merged = union(f[prev], tree, `${where}.${name}`, notes)
      if (prev !== name) notes.push(`${where}: fields ${prev} and ${name} are one Go field; spelled ${name}`)
      delete f[prev]
      byLower.set(name.toLowerCase(), name)
      f[name] = merged
    }
    return { t: 'struct', f }
  }
  if (a.t === 'map' && b.t === 'map') return { t: 'map', v: union(a.v, b.v, `${where}{}`, notes) }
  if (a.t === 'array' && b.t === 'array') return { t: 'array', i: union(a.i, b.i, `${where}[]`, notes) }
  throw new Error(`${where}: cannot unite a ${a.t} with a ${b.t}`)
}

/** The schema file's data, from the spec files in `specDir`; `notes` collects the spelling merges. */
export function buildBodySchema (specDir: string = DEFAULT_SPEC_DIR, notes: string[] = []): BodySchemaFile {
  const ops = new Map<string, Tree>()
  for (const file of SPEC_FILES) {
    const doc: unknown = YAML.parse(fs.readFileSync(path.join(specDir, file), 'utf8'))
    if (!isRec(doc)) throw new Error(`${file}: not a YAML mapping`)
    applyCorrections(file, doc)
    for (const [id, tree] of new SpecReader(file, doc, notes).bodies(doc)) {
      const prev = ops.get(id)
      ops.set(id, prev === undefined ? tree : union(prev, tree, id, notes))
    }
  }
  const operations: Record<string, Tree> = {}
  for (const id of [...ops.keys()].sort()) operations[id] = ops.get(id) as Tree
  return { generatedFrom: SPEC_FILES, operations }
}

/** Deterministic text: sorted keys, one field per line, two-space indent, `{"t":"any"}` inline. */
export function formatBodySchema (data: BodySchemaFile): string {
  const q = (s: string): string => JSON.stringify(s)
  const tree = (t: Tree, ind: string): string => {
    const inner = ind + '  '
    switch (t.t) {
      case 'any': return '{"t":"any"}'
      case 'array': return `{"t":"array","i":${tree(t.i, ind)}}`
      case 'map': return `{"t":"map","v":${tree(t.v, ind)}}`
      case 'struct': {
        const names = Object.keys(t.f).sort()
        if (names.length === 0) return '{"t":"struct","f":{}}'
        return `{"t":"struct","f":{\n${names.map((n) => `${inner}${q(n)}:${tree(t.f[n], inner)}`).join(',\n')}\n${ind}}}`
      }
    }
  }
  const ids = Object.keys(data.operations).sort()
  return '{\n' +
    ' "//":"Generated by scripts/gen-body-schema.ts; do not edit. See that file for the format.",\n' +
    ` "generatedFrom":${JSON.stringify(data.generatedFrom)},\n` +
    ' "operations":{\n' +
    ids.map((id) => `  ${q(id)}:${tree(data.operations[id], '  ')}`).join(',\n') +
    '\n }\n}\n'
}

/** The file's text, as the generator would write it now. */
export function generateBodySchema (specDir: string = DEFAULT_SPEC_DIR, notes: string[] = []): string {
  return formatBodySchema(buildBodySchema(specDir, notes))
}

function main (argv: readonly string[]): number {
  const check = argv.includes('--check')
  const notes: string[] = []
  const text = generateBodySchema(DEFAULT_SPEC_DIR, notes)
  for (const note of notes) console.error(`note: ${note}`)
  const current = fs.existsSync(SCHEMA_PATH) ? fs.readFileSync(SCHEMA_PATH, 'utf8') : ''
  if (check) {
    if (current === text) { console.log(`${path.relative(process.cwd(), SCHEMA_PATH)} is up to date`); return 0 }
    console.error(`${path.relative(process.cwd(), SCHEMA_PATH)} is stale: run node dist/scripts/gen-body-schema.js`)
    return 1
  }
  fs.writeFileSync(SCHEMA_PATH, text)
  console.log(`wrote ${path.relative(process.cwd(), SCHEMA_PATH)} (${Buffer.byteLength(text)} bytes)`)
  return 0
}

if (require.main === module) process.exitCode = main(process.argv.slice(2))
