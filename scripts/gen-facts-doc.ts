/**
 * Generates docs/facts.md from the facts' one declaration (FactsSchema in
 * src/policy/fields.ts) and the functions' signatures (src/policy/functions.ts).
 *
 *   node dist/scripts/gen-facts-doc.js            write the file
 *   node dist/scripts/gen-facts-doc.js --check    exit 1 if the committed file is stale
 *
 * test/policy-facts.test.ts runs the check.
 */
import fs from 'node:fs'
import path from 'node:path'
import { factsMarkdown } from '../src/policy/tool'

const file = path.resolve(__dirname, '../../docs/facts.md')
const text = factsMarkdown()
if (process.argv.includes('--check')) {
  const committed = fs.existsSync(file) ? fs.readFileSync(file, 'utf8') : ''
  if (committed !== text) {
    process.stderr.write(`${file} is stale: run npm run build && node dist/scripts/gen-facts-doc.js\n`)
    process.exit(1)
  }
} else {
  fs.writeFileSync(file, text)
}
