import { expect } from 'chai';
import { AGENT_OPTIONS, formatAgentHelp, parseAgentArgs } from '../../../src/cli/agent-options.js';

describe('parseAgentArgs', () => {
  it('gives the defaults the agent always had when no flag is set', () => {
    expect(parseAgentArgs([])).to.deep.equal({
      kind: 'run',
      flags: {
        procRoot: '/proc',
        intervalSeconds: 1,
        heartbeatSeconds: 60,
        pressuredHeartbeatSeconds: 10,
        publish: true,
        cgroupRoot: '/sys/fs/cgroup',
        attribution: true,
        culpritSharePercent: 25,
        victimPsiPercent: 20,
        includeLoopDevices: false,
        allowIoLimits: false,
        metricsBindAddress: ':8082',
        logLevel: 'info',
      },
    });
  });

  it('reads every flag, as --flag value and --flag=value, the last one winning', () => {
    const line = parseAgentArgs([
      '--node-name=n1',
      '--proc-root',
      '/host/proc',
      '--interval-seconds=2',
      '--interval-seconds',
      '5',
      '--heartbeat-seconds=30',
      '--pressured-heartbeat-seconds',
      '3',
      '--kubeconfig=/k',
      '--no-publish',
      '--cgroup-root=/host/sys/fs/cgroup',
      '--culprit-share-percent',
      '40',
      '--victim-psi-percent=100',
      '--runtime-cgroup=sandbox-remediator-lab',
      '--no-attribution',
      '--include-loop-devices',
      '--allow-io-limits',
      '--metrics-bind-address=127.0.0.1:9102',
      '--log-level',
      'debug',
    ]);
    expect(line).to.deep.equal({
      kind: 'run',
      flags: {
        nodeName: 'n1',
        procRoot: '/host/proc',
        intervalSeconds: 5,
        heartbeatSeconds: 30,
        pressuredHeartbeatSeconds: 3,
        kubeconfig: '/k',
        publish: false,
        cgroupRoot: '/host/sys/fs/cgroup',
        culpritSharePercent: 40,
        victimPsiPercent: 100,
        runtimeCgroup: 'sandbox-remediator-lab',
        attribution: false,
        includeLoopDevices: true,
        allowIoLimits: true,
        metricsBindAddress: '127.0.0.1:9102',
        logLevel: 'debug',
      },
    });
  });

  const refused: [string[], string][] = [
    [
      ['--interval-seconds', '0'],
      "option '--interval-seconds <n>' argument '0' is invalid. must be a positive integer",
    ],
    [
      ['--heartbeat-seconds=1.5'],
      "option '--heartbeat-seconds <n>' argument '1.5' is invalid. must be a positive integer",
    ],
    [
      ['--pressured-heartbeat-seconds=ten'],
      "option '--pressured-heartbeat-seconds <n>' argument 'ten' is invalid. must be a positive integer",
    ],
    [
      ['--culprit-share-percent=0'],
      "option '--culprit-share-percent <n>' argument '0' is invalid. must be an integer from 1 to 100",
    ],
    [
      ['--victim-psi-percent', '101'],
      "option '--victim-psi-percent <n>' argument '101' is invalid. must be an integer from 1 to 100",
    ],
    [
      ['--culprit-share-percent=12.5'],
      "option '--culprit-share-percent <n>' argument '12.5' is invalid. must be an integer from 1 to 100",
    ],
    [['--no-attribution=yes'], "unknown option '--no-attribution=yes'"],
    [
      ['--log-level=trace'],
      "option '--log-level <level>' argument 'trace' is invalid. Allowed choices are error, warn, info, debug.",
    ],
    [['--node-name'], "option '--node-name <name>' argument missing"],
    [['--nodename=n1'], "unknown option '--nodename=n1'"],
    [['--publish'], "unknown option '--publish'"],
    [['--no-publish=false'], "unknown option '--no-publish=false'"],
    [['-n'], "unknown option '-n'"],
    [['n1'], "too many arguments for 'agent'. Expected 0 arguments but got 1."],
  ];
  for (const [args, message] of refused)
    it(`refuses ${args.join(' ')} with commander's message`, () => {
      expect(parseAgentArgs(args)).to.deep.equal({ kind: 'error', message });
    });

  it('answers --help and -h, even after an unknown flag, but not after a bad value', () => {
    expect(parseAgentArgs(['--help']).kind).to.equal('help');
    expect(parseAgentArgs(['--bogus', '-h']).kind).to.equal('help');
    expect(parseAgentArgs(['--interval-seconds=0', '--help']).kind).to.equal('error');
  });
});

describe('formatAgentHelp', () => {
  const help = formatAgentHelp(80);

  it('lists every flag with its value name, and --help', () => {
    for (const o of AGENT_OPTIONS)
      expect(help).to.match(new RegExp(`^  --${o.flag}${o.kind === 'switch' ? ' ' : ` <${o.value}>`}`, 'm'));
    expect(help).to.match(/^ {2}-h, --help +display help for command$/m);
  });

  it('shows each default and the log levels', () => {
    const text = help.replace(/\s+/g, ' ');
    for (const shown of [
      '(default: "/proc")',
      'seconds between samples (default: 1)',
      'nothing moved (default: 60)',
      'after it changed (default: 10)',
      '(default: ":8082")',
      '(default: "/sys/fs/cgroup")',
      'is a Culprit (default: 25)',
      'is a Victim (default: 20)',
      '(choices: "error", "warn", "info", "debug", default: "info")',
    ])
      expect(text).to.include(shown);
  });

  it('wraps descriptions in a column, no line wider than asked for', () => {
    const lines = help.split('\n');
    const options = lines.slice(lines.indexOf('Options:') + 1, lines.indexOf('', lines.indexOf('Options:')));
    expect(options.every((l) => l.length <= 80)).to.equal(true);
    const column = options[0]!.indexOf('the node this agent runs on');
    expect(options.every((l) => /^ +$/.test(l.slice(0, column)) || /^ {2}-/.test(l))).to.equal(true);
  });
});
