/**
 * Dockerfile instructions as the engine reads them, for the `changes` of a commit or an
 * import: the engine joins them with newlines and parses the result as a Dockerfile
 * (dockerfile.BuildFromConfig), so parser directives (`# escape=`), line continuations,
 * quoting, escapes and several `key=value` pairs per LABEL all apply. dockerfile-ast
 * (the parser behind the Docker language server) reads them the same way; a regex over
 * the raw text does not.
 */
import { DockerfileParser, type Instruction } from 'dockerfile-ast'

/** The label keys the instructions set, ONBUILD triggers included, as the builder will read them. */
export function labelKeys (text: string): string[] {
  const keys: string[] = []
  const visit = (ins: Instruction): void => {
    const keyword = ins.getKeyword().toUpperCase()
    if (keyword === 'LABEL') {
      for (const p of (ins as unknown as { getProperties: () => Array<{ getName: () => string }> }).getProperties()) keys.push(p.getName())
    } else if (keyword === 'ONBUILD') {
      const trigger = (ins as unknown as { getTriggerInstruction: () => Instruction | null }).getTriggerInstruction()
      if (trigger) visit(trigger)
    }
  }
  for (const ins of DockerfileParser.parse(text).getInstructions()) visit(ins)
  return keys
}

/**
 * Whether a label key could end up as one of the gateway's owner labels: any spelling of
 * the prefix, or a key with a variable in it (the builder expands `$VAR` and `${VAR}`
 * from ENV instructions and the container's own environment, which the gateway does
 * not see).
 */
export function mayBeOwnerLabel (key: string): boolean {
  return /io\.portcullis\./i.test(key) || key.includes('$')
}

/**
 * A LABEL instruction setting `labels`, each key and value in double quotes; null when a
 * value holds a character whose reading depends on the escape character the changes may
 * have chosen (`# escape=`), or on variables: such a label cannot be stamped reliably.
 */
export function labelInstruction (labels: Record<string, string>): string | null {
  const all = Object.entries(labels).flat()
  if (all.some((s) => /["\\`$\r\n]/.test(s))) return null
  return `LABEL ${Object.entries(labels).map(([k, v]) => `"${k}"="${v}"`).join(' ')}`
}
