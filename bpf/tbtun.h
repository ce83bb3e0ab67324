/* tbtun: structs and constants shared by the eBPF datapath (tbtun.bpf.c) and user space
 * (src/tunbench/tbtun/maps.py packs the same layouts). Change both together; the layout
 * version below is checked by the loader. All multi-byte address/port fields are in network
 * byte order, counters and the VNI in host order. */
#ifndef TBTUN_H
#define TBTUN_H

#define TB_LAYOUT_VERSION 2
#define TB_MAX_RULES 4096          /* rule ids (counter slots) 0..TB_MAX_RULES-1 */

enum tb_encap {
	TB_ENCAP_VXLAN = 1,        /* RFC 7348: 8-byte header, I flag, 24-bit VNI */
	TB_ENCAP_GENEVE = 2,       /* RFC 8926: 8-byte base header, no options, TEB payload */
};

/* LPM keys: prefixlen counts the bits of addr that must match. */
struct tb_key4 {
	__u32 prefixlen;
	__u8 addr[4];
};

struct tb_key6 {
	__u32 prefixlen;
	__u8 addr[16];
};

/* What a rule says: where packets for its inner prefix go, and how. */
struct tb_rule {
	__u32 id;                  /* counter slot in tb_rule_stats */
	__u32 vni;                 /* 24 bits */
	__u8 kind;                 /* enum tb_encap */
	__u8 family;               /* underlay family of remote: 4 (6: not yet) */
	__be16 port;               /* outer UDP destination port */
	__u8 inner_mac[6];         /* inner Ethernet destination (the far device's MAC) */
	__u8 pad[2];
	__u8 remote[16];           /* remote underlay address (IPv4: first 4 bytes) */
};

/* Settings of one site's instance: one entry in tb_config (index 0). */
struct tb_config {
	__u32 version;             /* TB_LAYOUT_VERSION; 0: not configured, everything passes */
	__u32 realm;               /* route realm marking packets to encapsulate */
	__u32 mtu;                 /* underlay MTU: outer L3 packets larger than this drop */
	__be16 vxlan_port;         /* outer UDP ports decapsulated on ingress (0: off) */
	__be16 geneve_port;
	__u8 local4[4];            /* this site's underlay IPv4 address (outer source) */
	__u8 local6[16];
	__u8 marker[6];            /* next-hop MAC of tunnel-bound IPv6 routes */
	__u8 pad[2];
};

struct tb_counter {
	__u64 packets;
	__u64 bytes;
};

/* Slots of tb_stats (per CPU). */
enum tb_stat {
	TB_STAT_ENCAP = 0,         /* packets encapsulated (all rules) */
	TB_STAT_NO_RULE,           /* tunnel-routed packets without a rule: dropped */
	TB_STAT_OVERSIZE,          /* non-GSO packets over the MTU after encap: dropped */
	TB_STAT_ENCAP_ERR,         /* adjust_room/store failed: dropped */
	TB_STAT_DECAP,             /* packets decapsulated */
	TB_STAT_DECAP_ERR,         /* malformed tunnel packets to our port: dropped */
	TB_STAT_MAX,
};

#endif
