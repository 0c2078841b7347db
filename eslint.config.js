'use strict'

// One code style for src/, test/, bench/ and scripts/ (neostandard, the fastify
// ecosystem's standard style), and no import circles: `npm run lint`.
const neostandard = require('neostandard')
const importX = require('eslint-plugin-import-x')

module.exports = [
  ...neostandard({ ts: true, ignores: ['dist/**', 'node_modules/**', '.engine/**', '.tap/**', 'spec/**', '.prebuilt/**'] }),
  {
    rules: {
      // Fire-and-forget on purpose (a promise whose failure is handled where it is made).
      'no-void': ['error', { allowAsStatement: true }],
      // The engine refuses control characters in names and bodies; our checks match them.
      'no-control-regex': 'off',
      // Dockerfile, compose and policy texts hold `${VAR}` on purpose.
      'no-template-curly-in-string': 'off',
    },
  },
  {
    files: ['**/*.ts'],
    plugins: { 'import-x': importX },
    settings: {
      'import-x/resolver-next': [importX.createNodeResolver({ extensions: ['.ts', '.js', '.json'] })],
      // Read the imported .ts files with the TypeScript parser, or their imports go unseen.
      'import-x/parsers': { '@typescript-eslint/parser': ['.ts'] },
      'import-x/extensions': ['.ts', '.js'],
    },
    rules: {
      // A circle of imports means a helper lives in the wrong file (count type-only imports too).
      'import-x/no-cycle': ['error', { ignoreExternal: true }],
      // The layers (README, "Code map"): api/ is the ground floor; policy, audit, metrics and
      // config build on it; only gateway/ and the CLI put them together. Type imports count.
      'import-x/no-restricted-paths': ['error', {
        zones: [
          { target: './src/api', from: './src', except: ['./api'], message: 'src/api is the ground floor: it imports nothing else of ours' },
          { target: ['./src/policy', './src/audit', './src/metrics', './src/config'], from: ['./src/gateway', './src/cli.ts'], message: 'only the CLI and the gateway itself import the gateway' },
          { target: './src/audit', from: './src/policy', message: 'the audit trail records what it is given; it never calls into the policy' },
        ],
      }],
    },
  },
]
