// Tenant B on tenant A's objects (test/helpers/tenancy-cross.ts), on the run's plain
// engine: not a swarm manager, as most users run Docker.
import { crossTenantSuite } from './helpers/tenancy-cross'

crossTenantSuite('plain')
