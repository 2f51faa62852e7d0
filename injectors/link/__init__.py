"""Link faults: every host in a network namespace of its own, and what breaks its link.

``netns`` (the topology: namespaces, veths, a bridge; their cleanup), ``base`` (what
every link fault shares), ``faults`` (partition, link down, TCP reset, loss, rate
limit, delay, corruption), ``nfqueue`` (the userspace stage that serves delay and
corruption where the kernel has no netem) and ``netprobe`` (TCP probes that measure a
link and the stage's own cost). Root only; without it every fault says why not.
"""
