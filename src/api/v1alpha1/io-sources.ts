import { z } from 'zod';
import { KNOWN_IO_CONDITIONS } from './node-condition.js';

const seconds = (min: number, max: number) => z.int().min(min).max(max);

/** PromQL label matchers, with or without braces: name, an operator, a double-quoted value, comma-separated. */
const MATCHER = String.raw`\s*[a-zA-Z_][a-zA-Z0-9_]*\s*(=|!=|=~|!~)\s*"(?:[^"\\]|\\.)*"\s*`;
export const SERIES_SELECTOR = new RegExp(String.raw`^\s*\{?${MATCHER}(,${MATCHER})*,?\s*\}?\s*$`);

/** The operator's namespace holds the Secrets a policy's credentials come from (the chart's Role names them). */
export const CredentialSourceSchema = z
  .strictObject({
    file: z
      .string()
      .min(1)
      .optional()
      .describe("A path in the operator's container, e.g. a mounted Secret's file."),
    secret: z
      .strictObject({
        name: z.string().min(1).describe('The Secret, in the namespace the operator runs in.'),
        key: z.string().min(1).describe('Its data key.'),
      })
      .optional()
      .describe(
        "A Secret in the operator's namespace. The operator may read only the Secrets its Role names (by default sandbox-remediator-prometheus).",
      ),
  })
  .describe('Where a credential is read from: exactly one of file and secret.');
export type CredentialSource = z.infer<typeof CredentialSourceSchema>;

export const PrometheusSourceSchema = z
  .strictObject({
    url: z
      .string()
      .min(1)
      .describe('Base URL of the Prometheus HTTP API, e.g. http://prometheus.monitoring:9090.'),
    nodeLabel: z
      .string()
      .min(1)
      .default('instance')
      .describe('The series label whose value names the node (after nodeLabelRegex is applied).'),
    nodeLabelRegex: z
      .string()
      .default('^([^:]+)(:\\d+)?$')
      .describe(
        'Regular expression applied to the nodeLabel value; its first capture group is the node name.',
      ),
    queryTimeoutSeconds: seconds(1, 60).default(5).describe('Timeout of one PromQL query.'),
    seriesSelector: z
      .string()
      .regex(SERIES_SELECTOR, 'must be PromQL label matchers, e.g. {job="node-exporter"}')
      .optional()
      .describe(
        'Label matchers added to every node_exporter series the queries read, e.g. {job="node-exporter"}: only series of the job that scrapes node_exporter are believed. Without it, any series of the right name counts, and where a tenant can shape labels (a Pushgateway with honor_labels, annotation-based scraping, its own ServiceMonitor) a faked series could make a node IoPressureHigh.',
      ),
    cadvisorSeriesSelector: z
      .string()
      .regex(SERIES_SELECTOR, 'must be PromQL label matchers, e.g. {job="kubelet"}')
      .optional()
      .describe(
        'Label matchers added to every cAdvisor series the attribution reads (who does the IO), e.g. {job="kubelet",metrics_path="/metrics/cadvisor"}: without it, a faked series could name another team\'s pod as the culprit.',
      ),
    ca: CredentialSourceSchema.optional().describe(
      "The CA bundle (PEM) that signs the certificate of an https url, from a file in the operator's container or a Secret; without it the system's CAs are trusted.",
    ),
    bearerToken: CredentialSourceSchema.optional().describe(
      'A bearer token sent with every query (Authorization: Bearer), from a file (read again before each poll, so a rotated token is taken) or a Secret.',
    ),
  })
  .describe('Where and how to query node_exporter metrics; required when source is prometheus.');

export const NodeConditionSourceSchema = z
  .strictObject({
    type: z
      .string()
      .min(1)
      .default('IoPressure')
      .describe(
        `The node condition type that someone else (e.g. node-problem-detector) sets True under IO pressure. Known types: ${KNOWN_IO_CONDITIONS.join(', ')} (the last two reserved by Kubernetes for its PSI conditions, KEP-5394).`,
      ),
  })
  .describe('Which node condition reports IO pressure; used when source is nodeCondition.');
