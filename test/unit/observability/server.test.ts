import { expect } from 'chai';
import { EventEmitter } from 'node:events';
import { createServer, type Server } from 'node:net';
import { BindError, listen, parseBindAddress, serve } from '../../../src/observability/server.js';
import { bindRefusal } from '../../../src/cli/process.js';

/** A server whose listen fails as the kernel would, with `code`, without touching a port. */
function failingServer(code: string): Server {
  const server = new EventEmitter() as EventEmitter & { listen(): void };
  server.listen = () => {
    queueMicrotask(() => server.emit('error', Object.assign(new Error(`listen ${code}`), { code })));
  };
  return server as unknown as Server;
}

const rejection = (promise: Promise<unknown>) =>
  promise.then(
    () => expect.fail('resolved'),
    (err: unknown) => err,
  );

describe('listen', () => {
  const servers: Server[] = [];
  const bound = async () => {
    const server = createServer();
    servers.push(server);
    return { server, port: await listen(server, '127.0.0.1:0') };
  };
  afterEach(async () => {
    for (const server of servers.splice(0)) await new Promise((resolve) => server.close(resolve));
  });

  it('resolves with the port it bound', async () => {
    const { server, port } = await bound();
    expect(port).to.be.greaterThan(0);
    expect(server.listening).to.equal(true);
  });

  it('turns a port another process holds into a BindError naming the address', async () => {
    const { port } = await bound();
    const err = await rejection(listen(createServer(), `127.0.0.1:${port}`));
    expect(err).to.be.instanceOf(BindError);
    expect((err as BindError).problem).to.equal('in-use');
    expect((err as BindError).message).to.equal(`127.0.0.1:${port} is already in use`);
    expect(((err as BindError).cause as NodeJS.ErrnoException).code).to.equal('EADDRINUSE');
  });

  for (const [code, problem, message] of [
    ['EACCES', 'denied', ':80 needs privileges this process lacks (a port below 1024?)'],
    ['EADDRNOTAVAIL', 'not-local', ':80 is not an address of this machine'],
    ['ENOTFOUND', 'not-local', ':80 is not an address of this machine'],
  ] as const) {
    it(`turns ${code} into a BindError (${problem})`, async () => {
      const err = await rejection(listen(failingServer(code), ':80'));
      expect(err).to.be.instanceOf(BindError);
      expect([(err as BindError).problem, (err as BindError).message]).to.deep.equal([problem, message]);
    });
  }

  it('passes any other error on as it is: not a mistake a flag fixes', async () => {
    const err = await rejection(listen(failingServer('EMFILE'), ':80'));
    expect(err).not.to.be.instanceOf(BindError);
    expect((err as NodeJS.ErrnoException).code).to.equal('EMFILE');
  });

  for (const address of ['localhost:http', '127.0.0.1:', ':65536', '0']) {
    it(`refuses ${JSON.stringify(address)} as no address, before listening`, async () => {
      const err = await rejection(listen(failingServer('EMFILE'), address));
      expect(err).to.be.instanceOf(BindError);
      expect((err as BindError).problem).to.equal('invalid');
    });
  }
});

describe('parseBindAddress and serve', () => {
  it('reads kubebuilder-style addresses; "0" and "" turn the server off', async () => {
    expect(parseBindAddress(':8080')).to.deep.equal({ host: '0.0.0.0', port: 8080 });
    expect(parseBindAddress('[::1]:9090')).to.deep.equal({ host: '::1', port: 9090 });
    expect(parseBindAddress('8082')).to.deep.equal({ host: '0.0.0.0', port: 8082 });
    expect(parseBindAddress('0')).to.equal(undefined);
    expect(await serve('', {})).to.equal(undefined);
  });

  it('answers 500 when the metrics source throws at once, and keeps serving (the agent with no /proc/self)', async () => {
    let fail = true;
    const served = await serve('127.0.0.1:0', {
      registry: {
        contentType: 'text/plain',
        metrics: () => {
          if (fail) throw new Error('ENOENT: uv_resident_set_memory');
          return Promise.resolve('up 1\n');
        },
      },
    });
    try {
      const first = await fetch(`http://127.0.0.1:${served!.port}/metrics`);
      expect(first.status).to.equal(500);
      expect(await first.text()).to.contain('uv_resident_set_memory');
      fail = false;
      const second = await fetch(`http://127.0.0.1:${served!.port}/metrics`);
      expect([second.status, await second.text()]).to.deep.equal([200, 'up 1\n']);
    } finally {
      served?.server.close();
    }
  });
});

describe('bindRefusal', () => {
  const metrics = {
    what: 'metrics',
    flag: '--metrics-bind-address',
    holder: 'another agent on this machine?',
  };
  it('names the address, the likely holder and the flag to change, in one line', () => {
    expect(bindRefusal(new BindError(':8082', 'in-use'), metrics)).to.equal(
      'Refused to start: the metrics address :8082 is already in use (another agent on this machine?); pass --metrics-bind-address=<free port> or "0" to turn it off',
    );
    expect(bindRefusal(new BindError(':80', 'denied'), metrics)).to.equal(
      'Refused to start: the metrics address :80 needs privileges this process lacks (a port below 1024?); pass --metrics-bind-address=<port above 1023> or "0" to turn it off',
    );
  });
});
