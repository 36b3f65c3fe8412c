// Issue 40 §5: the Prometheus source believes only the series the policy scopes it to, and authenticates.
import { expect } from 'chai';
import { createServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import { credentialReader } from '../../../src/signals/factory.js';
import { httpGet } from '../../../src/signals/http-get.js';
import {
  attributionQueries,
  matchersOf,
  nodeQueries,
  PrometheusSource,
} from '../../../src/signals/prometheus.js';
import { generateServingCert } from '../../../src/webhook/certs.js';
import { T0 } from '../../support/builders.js';

const settings = {
  url: 'https://prom.example:9090',
  nodeLabel: 'instance',
  nodeLabelRegex: '^([^:]+)(:\\d+)?$',
  queryTimeoutSeconds: 5,
};
const empty = { status: 'success', data: { resultType: 'vector', result: [] } };

describe('the Prometheus series selectors', () => {
  const rows: [string | undefined, string][] = [
    [undefined, ''],
    ['{job="node-exporter"}', 'job="node-exporter"'],
    ['job="node-exporter"', 'job="node-exporter"'],
    [' { job="a", env=~"prod|stage", } ', 'job="a", env=~"prod|stage"'],
  ];
  for (const [selector, matchers] of rows)
    it(`reads ${JSON.stringify(selector)} as ${JSON.stringify(matchers)}`, () => {
      expect(matchersOf(selector)).to.equal(matchers);
    });

  it("adds the node selector to every node_exporter series, beside the series' own matchers", () => {
    const queries = nodeQueries('{job="node-exporter"}');
    expect(queries).to.deep.equal({
      psiSomeAvg10Percent: 'rate(node_pressure_io_waiting_seconds_total{job="node-exporter"}[1m]) * 100',
      psiFullAvg10Percent: 'rate(node_pressure_io_stalled_seconds_total{job="node-exporter"}[1m]) * 100',
      diskBusyPercent:
        'max without (device) (rate(node_disk_io_time_seconds_total{device!~"^(loop|ram|zram|sr|fd).*",job="node-exporter"}[1m])) * 100',
      blockedProcesses: 'node_procs_blocked{job="node-exporter"}',
    });
  });

  it('adds the cAdvisor selector to every pod series and the node selector to every device series', () => {
    const q = attributionQueries('instance', { node: '{job="node-exporter"}', cadvisor: '{job="kubelet"}' })!;
    const selectors = (text: string) => [...text.matchAll(/\b(container|node)_\w+\{([^}]*)\}/g)];
    for (const [, family, matchers] of [...selectors(q.pods), ...selectors(q.devices)])
      expect(matchers, `${family}: ${matchers}`).to.include(
        family === 'node' ? 'job="node-exporter"' : 'job="kubelet"',
      );
    expect(q.pods).to.include(
      '{__name__=~"container_(fs_(reads|writes)_bytes|blkio_device_usage)_total",pod!="",job="kubelet"}',
    );
    expect(selectors(q.pods).length + selectors(q.devices).length).to.equal(6 + 5);
  });

  it("sends every query with the policy's selector, its token and its CA", async () => {
    const seen: { query: string; headers: Record<string, string>; ca?: string }[] = [];
    const source = new PrometheusSource(
      { ...settings, seriesSelector: '{job="node-exporter"}' },
      (url, init) => {
        seen.push({
          query: url.searchParams.get('query') ?? '',
          headers: init.headers,
          ...(init.ca ? { ca: init.ca } : {}),
        });
        return Promise.resolve(new Response(JSON.stringify(empty), { status: 200 }));
      },
      () => T0,
      undefined,
      () => Promise.resolve({ ca: 'PEM', bearerToken: 's3cret' }),
    );
    await source.refresh(['n1']);
    expect(seen).to.have.length(4);
    for (const call of seen) {
      expect(call.query).to.include('job="node-exporter"');
      expect(call.headers).to.deep.equal({ authorization: 'Bearer s3cret' });
      expect(call.ca).to.equal('PEM');
    }
  });

  it('reads no node when its credentials cannot be read, and says why', async () => {
    const source = new PrometheusSource(
      settings,
      () => Promise.resolve(new Response(JSON.stringify(empty), { status: 200 })),
      () => T0,
      undefined,
      () => Promise.reject(new Error('Secret sandbox-remediator-prometheus has no key token')),
    );
    let failed = false;
    await source.refresh(['n1']).catch(() => (failed = true));
    expect(failed).to.equal(true);
    expect(source.problem('n1')?.message).to.include('has no key token');
  });
});

describe('credentialReader', () => {
  it("reads files on every poll, a Secret at most once a minute, and trims a token's newline", async () => {
    let clock = 0;
    const files: Record<string, string> = { '/ca.pem': 'CA-1' };
    const secretReads: string[] = [];
    const read = credentialReader(
      {
        ca: { file: '/ca.pem' },
        bearerToken: { secret: { name: 'sandbox-remediator-prometheus', key: 'token' } },
      },
      (name, key) => {
        secretReads.push(`${name}/${key}`);
        return Promise.resolve(`token-${secretReads.length}\n`);
      },
      (path) => Promise.resolve(files[path] ?? ''),
      () => clock,
    );
    expect(await read()).to.deep.equal({ ca: 'CA-1', bearerToken: 'token-1' });
    files['/ca.pem'] = 'CA-2';
    clock = 59_000;
    expect(await read()).to.deep.equal({ ca: 'CA-2', bearerToken: 'token-1' });
    clock = 60_000;
    expect(await read()).to.deep.equal({ ca: 'CA-2', bearerToken: 'token-2' });
    expect(secretReads).to.deep.equal([
      'sandbox-remediator-prometheus/token',
      'sandbox-remediator-prometheus/token',
    ]);
  });

  it('reads nothing where the policy names nothing', async () => {
    expect(await credentialReader({}, undefined)()).to.deep.equal({});
  });
});

describe("httpGet with a CA of the policy's own", () => {
  it('trusts a server that CA signed, sends the headers, and refuses it without the CA', async () => {
    const cert = generateServingCert('127.0.0.1');
    let auth: string | undefined;
    const server = createServer({ cert: cert.certPem, key: cert.keyPem }, (req, res) => {
      auth = req.headers.authorization;
      res.end('{"ok":true}');
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const url = new URL(`https://127.0.0.1:${(server.address() as AddressInfo).port}/api/v1/query`);
    try {
      const res = await httpGet(url, {
        signal: AbortSignal.timeout(5000),
        headers: { authorization: 'Bearer t' },
        ca: cert.caPem,
      });
      const chunks: Uint8Array[] = [];
      for await (const chunk of res.body ?? []) chunks.push(chunk);
      expect([res.ok, Buffer.concat(chunks).toString(), auth]).to.deep.equal([
        true,
        '{"ok":true}',
        'Bearer t',
      ]);
      let refused = false;
      await httpGet(url, { signal: AbortSignal.timeout(5000), headers: {} }).catch(() => (refused = true));
      expect(refused, 'an unknown CA refused').to.equal(true);
    } finally {
      server.close();
    }
  });
});
