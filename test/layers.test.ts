// The layers of src/ (README, "Code map"), checked over every import, type-only ones
// included: eslint's import-x/no-cycle and no-restricted-paths (npm run lint) skip
// `import type`, so a circle or a layer broken through types alone would go unseen there.
// The graph is read with TypeScript's own pre-processor, as tsc reads the imports.
import fs from 'node:fs'
import path from 'node:path'
import t from 'tap'
import ts from 'typescript'

const root = path.resolve(__dirname, '../..')
const src = path.join(root, 'src')

function sources (dir: string): string[] {
  return fs.readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const p = path.join(dir, e.name)
    if (e.isDirectory()) return sources(p)
    return e.name.endsWith('.ts') && !e.name.endsWith('.d.ts') ? [p] : []
  })
}

/** The file a relative specifier names, as Node and tsc resolve it here (x.ts, x/index.ts, x.json). */
function resolve (from: string, spec: string): string | null {
  if (!spec.startsWith('.')) return null
  const base = path.resolve(path.dirname(from), spec)
  for (const c of [base + '.ts', path.join(base, 'index.ts'), base]) {
    if (fs.existsSync(c) && fs.statSync(c).isFile()) return c
  }
  // What the built CLI reads beside dist/ (../../package.json) is not a source file.
  if (spec.endsWith('.json')) return null
  throw new Error(`${path.relative(root, from)}: cannot resolve ${spec}`)
}

/** Every file each file imports or re-exports from, values and types alike. */
export function importGraph (files: readonly string[]): Map<string, string[]> {
  const graph = new Map<string, string[]>()
  for (const f of files) {
    const info = ts.preProcessFile(fs.readFileSync(f, 'utf8'), true, true)
    const deps = info.importedFiles.map((i) => resolve(f, i.fileName)).filter((d): d is string => d !== null && d.endsWith('.ts'))
    graph.set(f, [...new Set(deps)])
  }
  return graph
}

/** The circles of a graph (Tarjan's strongly connected components of more than one file, or a file importing itself). */
export function circles (graph: Map<string, string[]>): string[][] {
  let index = 0
  const stack: string[] = []
  const on = new Set<string>()
  const idx = new Map<string, number>()
  const low = new Map<string, number>()
  const found: string[][] = []
  const visit = (v: string): void => {
    idx.set(v, index); low.set(v, index); index++
    stack.push(v); on.add(v)
    for (const w of graph.get(v) ?? []) {
      if (!idx.has(w)) { visit(w); low.set(v, Math.min(low.get(v)!, low.get(w)!)) } else if (on.has(w)) low.set(v, Math.min(low.get(v)!, idx.get(w)!))
    }
    if (low.get(v) === idx.get(v)) {
      const scc: string[] = []
      let w: string
      do { w = stack.pop()!; on.delete(w); scc.push(w) } while (w !== v)
      if (scc.length > 1 || (graph.get(v) ?? []).includes(v)) found.push(scc.map((f) => path.relative(root, f)).sort())
    }
  }
  for (const v of graph.keys()) if (!idx.has(v)) visit(v)
  return found
}

const rel = (f: string): string => path.relative(src, f).split(path.sep).join('/')
const layer = (f: string): string => rel(f).split('/')[0]

const graph = importGraph(sources(src))

t.test('src/ has no import circle, type-only imports included', async (t) => {
  t.ok(graph.size > 50, `read ${graph.size} files`)
  t.same(circles(graph), [], 'no circle')
})

t.test('the layers hold, type-only imports included', async (t) => {
  const broken: string[] = []
  for (const [from, deps] of graph) {
    for (const to of deps) {
      const a = layer(from)
      const b = layer(to)
      if (a === 'api' && b !== 'api') broken.push(`${rel(from)} -> ${rel(to)}: src/api imports nothing else of ours`)
      if (['policy', 'audit', 'metrics', 'config'].includes(a) && (b === 'gateway' || b === 'cli.ts')) broken.push(`${rel(from)} -> ${rel(to)}: only the CLI and the gateway import the gateway`)
      if (a === 'audit' && b === 'policy') broken.push(`${rel(from)} -> ${rel(to)}: the audit trail never imports the policy`)
    }
  }
  t.same(broken, [], 'every import keeps to its layer')
})

t.test('the check sees what it checks: a circle through types alone is found', async (t) => {
  const dir = fs.mkdtempSync(path.join(require('node:os').tmpdir(), 'pcx-layers-'))
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }))
  fs.writeFileSync(path.join(dir, 'a.ts'), "import type { B } from './b'\nexport interface A { b?: B }\n")
  fs.writeFileSync(path.join(dir, 'b.ts'), "export type { A as B } from './a'\n")
  fs.writeFileSync(path.join(dir, 'c.ts'), "import type { A } from './a'\nexport const c = (a: A): A => a\n")
  const g = importGraph(sources(dir))
  t.same(circles(g).map((c) => c.map((f) => path.basename(f))), [['a.ts', 'b.ts']], 'the type-only circle a <-> b, not c')
})
