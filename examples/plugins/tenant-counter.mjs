/**
 * An example third-party plugin, written the way one is written outside the Sluice tree: a plain
 * ES module whose default export is a plugin definition (the shape `definePlugin` checks). It counts
 * each tenant's requests in the plugin key-value store — the only state that outlives a reload, and
 * shared by every Sluice instance when the store is Redis — and reports the count in a response
 * header and in its own metric.
 *
 *   plugins:
 *     - name: counter
 *       use: ./examples/plugins/tenant-counter.mjs   # relative to the config file
 *       options: { header: x-tenant-requests }
 *
 * @type {import('../../plugins/api.js').PluginDefinition<{ header: string, ttl_ms: number }>}
 */
const tenantCounter = {
  name: 'tenant-counter',
  version: '1.0.0',
  options: {
    type: 'object',
    additionalProperties: false,
    properties: {
      header: { type: 'string', pattern: '^[a-z0-9-]+$', default: 'x-tenant-requests' },
      ttl_ms: { type: 'integer', minimum: 0, default: 0 },
    },
  },
  create(options, context) {
    const requests = context.metrics.counter(
      'sluice_plugin_tenant_counter_requests_total',
      'Requests counted by the tenant-counter example plugin, by tenant.',
      ['tenant'],
    );
    return {
      // Async: the store may be Redis. The tenant is known from onRoute on.
      async onRoute(req) {
        const tenant = req.tenant === '' ? 'anonymous' : req.tenant;
        req.state = await context.kv.incr(`requests:${tenant}`, 1, options.ttl_ms);
        requests.inc(1, tenant);
      },
      onResponseHead(req) {
        if (typeof req.state === 'number') req.setResponseHeader(options.header, String(req.state));
      },
    };
  },
};

export default tenantCounter;
