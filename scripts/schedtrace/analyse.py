#!/usr/bin/env python3
"""analyse.py TRACE [LONG_MS]: from record.sh's trace, each wait for a CPU
of the victim's and the daemon's threads (woken to switched in) of LONG_MS
(default 0.5) or more, and what it waited behind:

- what the thread current on the CPU it was woken onto was doing at the
  wake-up: in user mode, or inside which system call (where a kernel built
  PREEMPT_NONE cannot preempt it until it returns);
- whether the wait ended as that call returned, as a preemption the kernel
  owed the woken thread would (the reschedule flag is honoured on the way
  back to user mode, whatever the preemption model);
- how often that CPU switched to other threads meanwhile, and to whose.
"""
import collections
import re
import sys

path = sys.argv[1]
long_us = int(float(sys.argv[2]) * 1000) if len(sys.argv) > 2 else 500
procs = {}
for l in open(path + '.pids'):
    role, pids = l.split(':', 1)
    procs.setdefault(role.strip(), set()).update(int(p) for p in pids.split())
syscalls = {}
for l in open('/usr/include/x86_64-linux-gnu/asm/unistd_64.h'):
    m = re.match(r'#define __NR_(\w+) (\d+)', l)
    if m:
        syscalls[int(m.group(2))] = m.group(1)

line = re.compile(r'^\s*(.+?)-(\d+)\s+\(\s*([-\d]+)\)\s+\[(\d+)\]\s+\S+\s+([\d.]+):\s+(\w+):\s*(.*)$')
current = {}    # CPU: thread
tgid, comm = {}, {}
in_syscall = {}  # thread: syscall number
in_softirq = set()  # CPUs
pending = {}    # woken thread: its wait so far
waits = []


def role(tid):
    if tid == 0:
        return 'idle'
    for r, pids in procs.items():
        if tgid.get(tid) in pids:
            return r
    return comm.get(tid, '?')


for l in open(path):
    m = line.match(l)
    if not m:
        continue
    name, tid, tg, cpu, ts, event, rest = m.groups()
    tid, cpu, ts = int(tid), int(cpu), int(round(float(ts) * 1e6))
    if tg.strip('-'):
        tgid[tid] = int(tg)
    comm[tid] = name
    if event != 'sched_switch' and current.get(cpu) != tid:
        # a CPU that left idle records no switch: its thread runs from here
        if tid in pending:
            w = pending.pop(tid)
            w.update(end=ts, ended='unrecorded', ran=cpu)
            waits.append(w)
        current[cpu] = tid
    if event == 'sys_enter':
        in_syscall[tid] = int(rest.split()[1])
    elif event == 'sys_exit':
        in_syscall.pop(tid, None)
        for w in pending.values():
            if w['ahead'] == tid and w['returned'] is None:
                w['returned'] = ts
    elif event == 'softirq_entry':
        in_softirq.add(cpu)
    elif event == 'softirq_exit':
        in_softirq.discard(cpu)
    elif event == 'sched_wakeup':
        kv = dict(x.split('=', 1) for x in rest.split() if '=' in x)
        woken, onto = int(kv['pid']), int(kv['target_cpu'])
        if woken in pending:
            continue
        ahead = current.get(onto, -1)
        doing = 'idle' if ahead == 0 else 'user mode'
        if ahead in in_syscall:
            doing = syscalls.get(in_syscall[ahead], str(in_syscall[ahead]))
        if onto in in_softirq:
            doing += ' + softirq'
        pending[woken] = dict(tid=woken, start=ts, cpu=onto, ahead=ahead, doing=doing,
                              in_syscall=ahead in in_syscall, returned=None, passed=[])
    elif event == 'sched_switch':
        kv = dict(re.findall(r'(\w+)=(\S+)', rest.replace(' ==> ', ' ')))
        prev, nxt, state = int(kv['prev_pid']), int(kv['next_pid']), kv['prev_state']
        for woken, w in pending.items():
            if w['cpu'] == cpu and woken != nxt:
                w['passed'].append((state.startswith('R'), nxt))
        current[cpu] = nxt
        if nxt in pending:
            w = pending.pop(nxt)
            w.update(end=ts, ended='preempted' if state.startswith('R') else 'blocked', ran=cpu)
            waits.append(w)

for r in ('victim', 'daemon'):
    mine = [w for w in waits if role(w['tid']) == r]
    slow = [w for w in mine if w['end'] - w['start'] >= long_us]
    if not slow:
        print(f'{r}: {len(mine)} waits, none of {long_us} us or more')
        continue
    lens = sorted(w['end'] - w['start'] for w in slow)
    print(f'{r}: {len(mine)} waits, {len(slow)} of {long_us} us or more (p50 {lens[len(lens) // 2]} us, max {lens[-1]} us)')
    print('  the thread ahead at the wake-up:', dict(collections.Counter(role(w['ahead']) for w in slow).most_common(8)))
    print('  it was in:', dict(collections.Counter(w['doing'] for w in slow).most_common(10)))
    print('  the wait ended as the thread before it:', dict(collections.Counter(w['ended'] for w in slow)))
    sys_ahead = [w for w in slow if w['in_syscall']]
    at_return = sum(1 for w in sys_ahead if w['returned'] is not None and w['end'] - w['returned'] <= 50)
    print(f'  behind a system call: {len(sys_ahead)}; ended within 50 us of its return: {at_return}')
    user = [w for w in slow if w['doing'].startswith('user mode')]
    print(f'  behind user mode: {len(user)}; ended only as the thread before it blocked: {sum(1 for w in user if w["ended"] == "blocked")}')
    switches = [p for w in slow for p in w['passed']]
    print(f'  its CPU switched to other threads meanwhile {len(switches)} times ({sum(1 for p, _ in switches if p)} preempting),'
          f' in {sum(1 for w in slow if len(w["passed"]) >= 5)} waits 5 times or more; to:',
          dict(collections.Counter(role(n) for _, n in switches).most_common(6)))
    print(f'  ran on another CPU than it was woken onto: {sum(1 for w in slow if w["ran"] != w["cpu"])}')
