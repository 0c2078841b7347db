// Tenant B on tenant A's objects (test/helpers/tenancy-cross.ts), on the run's
// swarm-mode engine: services, tasks, secrets, configs and nodes included.
import { crossTenantSuite } from './helpers/tenancy-cross'

crossTenantSuite('swarm')
