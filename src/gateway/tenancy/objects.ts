/** The kinds of engine objects the tenancy stage resolves (lookup.ts) and scopes. */
export type ObjectKind = 'container' | 'volume' | 'network' | 'exec' | 'service' | 'task' | 'secret' | 'config' | 'image'
