package locale

// zhCN maps each English message (the catalogue key, printed as it is in
// en) to its zh-CN text. Names from the cluster (pods, nodes, namespaces,
// reasons the kubelet or an actor wrote) are arguments, never translated.
// "Pod" and "kubelet" stay as the Kubernetes documentation in Chinese keeps
// them.
var zhCN = map[string]string{
	// Default card titles (a route's title or a report's own replaces them).
	"Pod cleanup":               "Pod 清理",
	"Node cordon":               "节点封锁",
	"Node image storage":        "节点镜像存储",
	"Pods restarting too often": "Pod 重启过多",
	" · cluster %s":             " · 集群 %s",

	// Cleanup.
	"**%d** cleanup results: %s": "**%d** 条清理结果：%s",
	"**Pod reasons:** %s":        "**Pod 原因：** %s",
	"**Namespaces:** %s":         "**命名空间：** %s",
	"**Pod:** %s  **Node:** %s":  "**Pod：** %s  **节点：** %s",
	"**Why:** %s":                "**原因：** %s",
	"**Error:** %s":              "**错误：** %s",
	"%s (dry run)":               "%s（演练）",
	", ":                         "，",
	"and %d more":                "另有 %d 项",
	"Pod":                        "Pod",
	"Node":                       "节点",
	"Result":                     "结果",
	"Reason":                     "原因",

	// Cordon.
	"**%d** cordon decisions: %s":                               "**%d** 条封锁决定：%s",
	"**Node:** %s  **Pods:** %d (cordon at %d, uncordon at %d)": "**节点：** %s  **Pod 数：** %d（达到 %d 个封锁，降到 %d 个解封）",
	"Pods": "Pod 数",

	// Image storage.
	"**%d** nodes over the image-storage threshold":                                                           "**%d** 个节点的镜像存储超过阈值",
	"≥: at least; the kubelet lists only a node's largest images (raise --node-status-max-images to see all)": "≥：至少；kubelet 只列出节点上最大的镜像（调高 --node-status-max-images 可看到全部）",
	"Images": "镜像数",
	"Size":   "大小",

	// Restart report.
	"**%d** pods restarted more than **%d** times (%s), %d restarts in all; %d pods checked":      "**%d** 个 Pod 重启超过 **%d** 次（%s），共重启 %d 次；检查了 %d 个 Pod",
	"**%d** workloads restarted more than **%d** times (%s), %d restarts in all; %d pods checked": "**%d** 个工作负载重启超过 **%d** 次（%s），共重启 %d 次；检查了 %d 个 Pod",
	"No pod restarted more than **%d** times; %d pods checked":                                    "没有 Pod 重启超过 **%d** 次；检查了 %d 个 Pod",
	"%s/%s (%d pods)": "%s/%s（%d 个 Pod）",
	"Namespace":       "命名空间",
	"Restarts":        "重启次数",
	"Last reason":     "最近原因",

	// Every chat card.
	"…and %d more":                   "…另有 %d 行",
	"opswire · cluster %s · %s · %s": "opswire · 集群 %s · %s · %s",

	// Words (Word): severities, verbs, report modes, image alert reasons.
	"info":              "信息",
	"warning":           "警告",
	"critical":          "严重",
	"deleted":           "已删除",
	"forcedeleted":      "已强制删除",
	"deletionrequested": "已请求删除",
	"skipped":           "已跳过",
	"dryrun":            "演练",
	"failed":            "失败",
	"cordoned":          "已封锁",
	"uncordoned":        "已解封",
	"handedover":        "已移交",
	"tainted":           "已加污点",
	"untainted":         "已去污点",
	"total":             "累计",
	"increase":          "新增",
	"maxBytes":          "超过大小上限",
	"maxPercent":        "超过占用比例上限",
	"growth":            "增长过快",
	"truncated":         "镜像列表不全",
}

// words are the keys Word translates; other values pass through.
var words = func() map[string]struct{} {
	m := map[string]struct{}{}
	for _, w := range []string{"info", "warning", "critical", "deleted", "forcedeleted", "deletionrequested", "skipped",
		"dryrun", "failed", "cordoned", "uncordoned", "handedover", "tainted", "untainted", "total", "increase",
		"maxBytes", "maxPercent", "growth", "truncated"} {
		m[w] = struct{}{}
	}
	return m
}()
