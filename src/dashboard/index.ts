/**
 * `persistent-queue/dashboard`: a web dashboard for a queue in a store directory (README, "`pq ui`:
 * the dashboard"). `pq ui DIR` serves it on 127.0.0.1; a service that wants it on its own port
 * mounts {@link dashboard}'s handler. It reads the live queue through the process that has it open
 * (its endpoint) and the store's files read-only, and acts only through that process.
 */
export { dashboard, serveDashboard, type Dashboard, type DashboardOptions, type ServeOptions, type ServedDashboard } from './dashboard.js';
